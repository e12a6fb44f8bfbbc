package ampx

import (
	"errors"
	"testing"
	"unsafe"
)

// Single-process checks of the data-parallel surface; training over ranks
// is mpitest/main.go, run under mpirun by run_tests.sh.
func TestDataParallelBadInput(t *testing.T) {
	if d := DefaultDataParallelOptions(); d != (DataParallelOptions{BucketBytes: 25 << 20,
		FirstBucketBytes: 1 << 20, Average: true, ReduceInFP32: false, Overlap: true, ZeroStage: 0}) {
		t.Errorf("defaults %+v", d)
	}
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	if _, err := CommFromMPI(ctx, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("CommFromMPI(nil): %v", err)
	}
	if _, err := CommFromNCCL(ctx, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("CommFromNCCL(nil): %v", err)
	}
	var fake [8]byte
	if _, err := CommFromNCCL(ctx, unsafe.Pointer(&fake)); !errors.Is(err, ErrNotSupported) {
		t.Errorf("NCCL on a CPU context: %v", err)
	}
	id := make([]byte, NCCLUniqueIDBytes)
	if _, err := CommInitNCCL(ctx, id, 2, 0); !errors.Is(err, ErrNotSupported) {
		t.Errorf("CommInitNCCL on a CPU context: %v", err)
	}
	for _, bad := range [][]byte{nil, make([]byte, NCCLUniqueIDBytes-1)} {
		if _, err := CommInitNCCL(ctx, bad, 2, 0); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("an id of %d bytes: %v", len(bad), err)
		}
	}
	// Without NCCL, or without a device, an id cannot be made: an error,
	// never a crash.
	if made, err := NCCLUniqueID(); err == nil {
		if len(made) != NCCLUniqueIDBytes {
			t.Errorf("id of %d bytes", len(made))
		}
	} else if !errors.Is(err, ErrNotSupported) && !errors.Is(err, ErrDevice) {
		t.Errorf("NCCLUniqueID: %v", err)
	}

	p := must(ctx.Zeros(F32, 4))(t)
	ok(t, p.SetRequiresGrad(true))
	opt := must(NewSGD(ctx, []*Tensor{p}, nil))(t)
	defer opt.Close()
	if _, err := NewDataParallel(nil, opt, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("NewDataParallel without a communicator: %v", err)
	}
	var comm *Comm
	if _, _, err := comm.Rank(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Rank of nil: %v", err)
	}
	if err := comm.SetTimeout(1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("SetTimeout of nil: %v", err)
	}
	comm.Close()
	var dp *DataParallel
	for what, err := range map[string]error{
		"SetSync": dp.SetSync(false),
		"Reduce":  dp.Reduce(),
		"Stats":   func() error { _, err := dp.Stats(); return err }(),
	} {
		if !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s of nil: %v", what, err)
		}
	}
	dp.Close()
}
