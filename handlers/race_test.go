//go:build race

package handlers

// raceEnabled reports a build with the race detector, which changes what
// allocates.
const raceEnabled = true
