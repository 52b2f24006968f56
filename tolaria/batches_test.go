package tolaria_test

import (
	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/tolaria"
)

// The prefetching loader is the trainer's data source as it is.
var _ tolaria.Batches = (*data.Loader)(nil)
