package autograd

import "github.com/esper-go/esper/kernels"

const kernelsAdd = kernels.Add
