//go:build race

package headerset

// raceEnabled reports a build with the race detector, under which sync.Pool
// drops a share of what is put back at random, so allocation counts vary.
const raceEnabled = true
