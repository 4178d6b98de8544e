//go:build !race

package headerset

const raceEnabled = false
