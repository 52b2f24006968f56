package tolaria_test

import (
	"github.com/esper-go/esper/data"
	"github.com/esper-go/esper/tolaria"
)

// The prefetching loader is the trainer's data source as it is, and an
// InputSource (it reports its device, its staging and its copy time).
var (
	_ tolaria.Batches     = (*data.Loader)(nil)
	_ tolaria.InputSource = (*data.Loader)(nil)
)
