package record

import (
	"encoding/json"
	"math"

	"github.com/systemone/systemone-gateway/evaluation"
)

// Agree reports whether a label of question type typ agrees with the
// model's answer, as the review API's `/labels` lines and `replay` count
// it: noul label == (answer >= 0.5), choice label == answer, score
// |label - answer| <= 0.5. An answer that is null or not of the type's kind
// (the model's answer was unreadable) never agrees: the model gave no
// usable answer, so counting it as agreement would flatter the model in
// calibration.
func Agree(typ string, label, answer json.RawMessage) bool {
	if len(answer) == 0 || string(answer) == "null" {
		return false
	}
	switch typ {
	case evaluation.TypeNoul:
		var l bool
		var a float64
		return json.Unmarshal(label, &l) == nil && json.Unmarshal(answer, &a) == nil && l == (a >= 0.5)
	case evaluation.TypeChoice:
		var l, a string
		return json.Unmarshal(label, &l) == nil && json.Unmarshal(answer, &a) == nil && l == a
	case evaluation.TypeScore:
		var l, a float64
		return json.Unmarshal(label, &l) == nil && json.Unmarshal(answer, &a) == nil && math.Abs(l-a) <= 0.5
	}
	return false
}
