package route

import (
	"net/http"
	"testing"
)

// TestHeaderNamesAreCanonical: SetHeaders writes the map directly, which is
// only right for names net/http would not rewrite.
func TestHeaderNamesAreCanonical(t *testing.T) {
	for _, name := range []string{HeaderRoute, HeaderReason, HeaderModel, HeaderConfidence, HeaderQuestions} {
		if c := http.CanonicalHeaderKey(name); c != name {
			t.Errorf("%s is not canonical (%s)", name, c)
		}
	}
}
