package drain

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestRetireWithNothingInFlightReleasesAtOnce(t *testing.T) {
	var g Gate
	released := 0
	g.Retire(func() { released++ })
	if released != 1 {
		t.Fatalf("released %d times, want 1", released)
	}
	if g.Enter() {
		t.Error("a request after the release was told its resources are held")
	}
	g.Exit()
	if released != 1 {
		t.Fatalf("a late request's exit released again (%d)", released)
	}
}

func TestTheLastRequestOutReleases(t *testing.T) {
	var g Gate
	released := 0
	for range 2 {
		if !g.Enter() {
			t.Fatal("a live gate refused its resources")
		}
	}
	g.Retire(func() { released++ })
	if released != 0 {
		t.Fatal("released with two requests in flight")
	}
	if !g.Enter() {
		t.Fatal("a request arriving while the retired gate drains was told its resources are gone")
	}
	g.Exit()
	g.Exit()
	if released != 0 {
		t.Fatal("released with one request in flight")
	}
	g.Exit()
	if released != 1 {
		t.Fatalf("released %d times once the last request left, want 1", released)
	}
}

// Under concurrent requests the release runs once, after every request
// that entered before it has exited.
func TestReleaseRunsOnceAfterEveryHeldRequest(t *testing.T) {
	for range 200 {
		var g Gate
		var inside, releases atomic.Int64
		var early atomic.Bool
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range 50 {
					held := g.Enter()
					if held {
						inside.Add(1)
					}
					if held && releases.Load() != 0 {
						early.Store(true)
					}
					if held {
						inside.Add(-1)
					}
					g.Exit()
				}
			}()
		}
		close(start)
		g.Retire(func() {
			if inside.Load() != 0 {
				early.Store(true)
			}
			releases.Add(1)
		})
		wg.Wait()
		if n := releases.Load(); n != 1 {
			t.Fatalf("released %d times, want 1", n)
		}
		if early.Load() {
			t.Fatal("released while a request that held the resources was inside")
		}
	}
}

func TestNilGateReleasesAtOnce(t *testing.T) {
	var g *Gate
	released := false
	if !g.Enter() {
		t.Error("a nil gate reported released resources")
	}
	g.Exit()
	g.Retire(func() { released = true })
	if !released {
		t.Error("a nil gate did not release")
	}
}
