package api

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/systemone/systemone-gateway/internal/review/calibrate"
	"github.com/systemone/systemone-gateway/internal/review/record"
)

// serveProgress answers GET /progress?target=<t>&delta=<d>&by=<type|question|org>&min_labels=<n>&method=<anytime|uniform|weighted>&family=<0|1>&since=<time|entry id>
// with exactly what `systemone-gateway calibrate --json` prints for the
// labels stored now: the same package computes it (calibrate.Sample) and
// writes it (calibrate.WriteJSON), from the same lines GET /labels
// exports, read as typed lines (record.Label) in the same bounded batches
// and handed to the calibration as they are. The defaults are the command's (calibrate.DefaultOptions:
// delta 0.05, by type, min_labels 30, method anytime, which holds however
// often the page asks); target is required. A missing or bad parameter
// (a target or delta outside (0, 1) included) is a 422 list. Without
// method, labels the default method refuses, those of the active audit,
// are calibrated with the weighted method, so that the page shows progress
// under either audit; labels no method can read (a mix with and without
// audit_p) are a 422 that says why.
func (h *Handler) serveProgress(w http.ResponseWriter, r *http.Request) {
	opts, errs := progressOptions(r.URL.Query())
	if errs.any() {
		errs.write(w)
		return
	}
	opts.CorrectWithin, opts.MaxQuestions, opts.AsOf = h.correctWithin(), h.maxQuestions(), h.clock()()
	sample := calibrate.NewSample()
	err := h.store.export(r.Context(), exportBatch, func(stored []string) error {
		if i, err := sample.AddStored(stored); err != nil {
			l, _ := record.ParseLabel([]byte(stored[i])) // for its entry, if it has one
			return fmt.Errorf("stored label of %s: %v", l.Entry, err)
		}
		return nil
	})
	if err != nil {
		h.storeFailed(w, "progress", err)
		return
	}
	res, err := sample.Calibrate(opts)
	if errors.Is(err, calibrate.ErrNeedsWeighted) && !r.URL.Query().Has("method") {
		// The labels of the active audit (or of audits drawn with
		// different shares) are refused by the default method, which
		// assumes a uniform draw. The page asks with no method: it gets
		// the weighted method's answer, the one method valid for them.
		opts.Method = calibrate.MethodWeighted
		res, err = sample.Calibrate(opts)
	}
	if err != nil { // the options were checked above: the labels can't be calibrated
		writeDetail(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	late, err := h.store.lateCounts(r.Context())
	if err != nil {
		h.storeFailed(w, "progress", err)
		return
	}
	for i := range res.Groups {
		g := &res.Groups[i]
		g.LateCorrections, g.HasLateCorrections = lateFor(late, lateGroup{model: g.Model, typ: g.Type, org: g.Org}), true
	}
	var out bytes.Buffer
	if err := calibrate.WriteJSON(&out, res); err != nil {
		writeDetail(w, http.StatusInternalServerError, "internal_error")
		return
	}
	setAPIHeaders(w.Header(), "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(out.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out.Bytes())
}

// progressOptions reads the calibration's options from the query, with the
// command's defaults, checking each as the command does.
func progressOptions(query url.Values) (calibrate.Options, errorList) {
	var errs errorList
	opts := calibrate.DefaultOptions()
	fraction := func(name string, into *float64, required bool) {
		v, ok := query[name]
		if !ok {
			if required {
				errs.add("missing", loc("query", name), "Field required", json0, nil)
			}
			return
		}
		f, err := strconv.ParseFloat(v[0], 64)
		switch {
		case err != nil || math.IsNaN(f) || math.IsInf(f, 0):
			errs.add("float_parsing", loc("query", name), "Input should be a valid number, unable to parse string as a number", jsonString(v[0]), nil)
		case f <= 0:
			errs.add("greater_than", loc("query", name), "Input should be greater than 0", jsonString(v[0]), map[string]any{"gt": 0})
		case f >= 1:
			errs.add("less_than", loc("query", name), "Input should be less than 1", jsonString(v[0]), map[string]any{"lt": 1})
		default:
			*into = f
		}
	}
	fraction("target", &opts.Target, true)
	fraction("delta", &opts.Delta, false)
	if v, ok := query["by"]; ok {
		if v[0] != calibrate.ByType && v[0] != calibrate.ByQuestion && v[0] != calibrate.ByOrg {
			expected := literals([]string{calibrate.ByType, calibrate.ByQuestion, calibrate.ByOrg})
			errs.add("literal_error", loc("query", "by"), "Input should be "+expected, jsonString(v[0]), map[string]any{"expected": expected})
		} else {
			opts.By = v[0]
		}
	}
	if n, ok := positiveInt(&errs, query, "min_labels"); ok {
		opts.MinLabels = n
	}
	opts.Family = boolParam(&errs, query, "family")
	if v, ok := query["method"]; ok {
		if !slices.Contains(calibrate.Methods, v[0]) {
			expected := literals(calibrate.Methods)
			errs.add("literal_error", loc("query", "method"), "Input should be "+expected, jsonString(v[0]), map[string]any{"expected": expected})
		} else {
			opts.Method = v[0]
		}
	}
	if v, ok := query["since"]; ok && v[0] != "" {
		// An empty since is the page's "all labels": every entry.
		if since, err := calibrate.ParseSince(v[0]); err != nil {
			errs.add("value_error", loc("query", "since"), "Value error, not an RFC 3339 time (2026-01-02T15:04:05Z, from 1970 on) or a stream entry id (<ms>-<seq>)", jsonString(v[0]), nil)
		} else {
			opts.Since = since
		}
	}
	return opts, errs
}

// json0 is the input of a missing query parameter, as FastAPI writes it.
var json0 = []byte("null")

// positiveInt reads an integer query parameter of at least 1; ok is false
// when it is absent or bad (then errs says why). A number beyond int reads
// as the largest int: it is merely large.
func positiveInt(errs *errorList, query url.Values, name string) (n int, ok bool) {
	v, present := query[name]
	if !present {
		return 0, false
	}
	n, err := strconv.Atoi(v[0])
	if errors.Is(err, strconv.ErrRange) {
		err = nil // Atoi saturates; the sign decides below
	}
	switch {
	case err != nil:
		errs.add("int_parsing", loc("query", name), "Input should be a valid integer, unable to parse string as an integer", jsonString(v[0]), nil)
	case n < 1:
		errs.add("greater_than_equal", loc("query", name), "Input should be greater than or equal to 1", jsonString(v[0]), map[string]any{"ge": 1})
	default:
		return n, true
	}
	return 0, false
}
