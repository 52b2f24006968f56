package kasmina_test

import (
	"fmt"
	"testing"

	"github.com/esper-go/esper/internal/testdevice"
	"github.com/esper-go/esper/tensor"
)

// exampleT stands in for the testing.TB that examples lack, so that they
// ask internal/testdevice for their device as the tests do; a failure
// panics, which fails the example. testdevice calls nothing else on it.
type exampleT struct{ testing.TB }

func (exampleT) Helper()                           {}
func (exampleT) Fatal(args ...any)                 { panic(fmt.Sprint(args...)) }
func (exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// exampleDevice is the device the examples run on: the CPU, or the one
// ESPER_TEST_DEVICE names.
func exampleDevice() tensor.Device { return testdevice.Device(exampleT{}) }
