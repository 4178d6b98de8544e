//go:build !race

package guarantee

const raceEnabled = false
