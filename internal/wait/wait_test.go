package wait

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// failure records the Fatalf of a wait run on a goroutine of its own.
type failure struct {
	testing.TB
	msg string
}

func (f *failure) Helper() {}

func (f *failure) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run runs wait with f and returns the failure's message ("" if none).
func run(wait func(testing.TB)) string {
	f := &failure{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		wait(f)
	}()
	<-done
	return f.msg
}

// Within returns once its condition holds, and otherwise fails after its
// bound quoting what the condition saw last.
func TestWithin(t *testing.T) {
	calls := 0
	if msg := run(func(tb testing.TB) {
		Within(tb, Bound, "the third call", func() error {
			if calls++; calls < 3 {
				return fmt.Errorf("call %d", calls)
			}
			return nil
		})
	}); msg != "" || calls != 3 {
		t.Errorf("a condition that comes: failed %q after %d calls", msg, calls)
	}
	calls = 0
	if msg := run(func(tb testing.TB) {
		Within(tb, 20*time.Millisecond, "something", func() error {
			calls++
			return fmt.Errorf("call %d", calls)
		})
	}); msg != fmt.Sprintf("waited 20ms for something: call %d", calls) {
		t.Errorf("a condition that never comes: %q after %d calls", msg, calls)
	}
	if msg := run(func(tb testing.TB) {
		Within(tb, time.Millisecond, "nothing", func() error { return errNotYet })
	}); msg != "waited 1ms for nothing" {
		t.Errorf("Until's condition: %q", msg)
	}
}
