package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net/http"

	"github.com/holdfast-bot/holdfast/engine/library"
	"github.com/holdfast-bot/holdfast/store"
)

// MaxBodyBytes caps every request body (SPEC §8: oversize → 413).
const MaxBodyBytes = 1 << 20

// ErrorBody is the one error shape of the API.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// WriteJSON writes v with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError writes the error shape with a code derived from status.
func WriteError(w http.ResponseWriter, status int, message string) {
	var b ErrorBody
	b.Error.Code = codeFor(status)
	b.Error.Message = message
	WriteJSON(w, status, b)
}

func codeFor(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusUnauthorized:
		return "unauthorized"
	case http.StatusForbidden:
		return "forbidden"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusConflict:
		return "conflict"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusMethodNotAllowed:
		return "method_not_allowed"
	case http.StatusUnsupportedMediaType:
		return "unsupported_media_type"
	case http.StatusServiceUnavailable:
		return "unavailable"
	default:
		return "internal"
	}
}

// ErrForbidden marks a caller who may not do what they asked.
var ErrForbidden = errors.New("forbidden")

// Fail maps err to its status and writes it; unexpected errors are logged
// and their text withheld from the caller.
func Fail(w http.ResponseWriter, r *http.Request, log *slog.Logger, err error) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		WriteError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, store.ErrConflict):
		WriteError(w, http.StatusConflict, err.Error())
	case errors.Is(err, library.ErrInvalid), errors.Is(err, ErrInvalid):
		WriteError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrForbidden), errors.Is(err, store.ErrForbidden):
		WriteError(w, http.StatusForbidden, store.ReasonOf(err))
	default:
		log.ErrorContext(r.Context(), "request failed", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.Any("error", err))
		WriteError(w, http.StatusInternalServerError, "internal error")
	}
}

// ErrInvalid marks a request a client must fix.
var ErrInvalid = errors.New("invalid request")

// Invalidf builds an ErrInvalid with a message.
func Invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// Decode reads a JSON body into v: 415 unless the body is JSON, 413 past
// MaxBodyBytes, 400 for malformed JSON or unknown fields. It writes the
// error itself and reports whether decoding succeeded.
func Decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		WriteError(w, http.StatusUnsupportedMediaType, "request body must be Content-Type: application/json")
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			WriteError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", MaxBodyBytes))
			return false
		}
		WriteError(w, http.StatusBadRequest, "malformed JSON: "+err.Error())
		return false
	}
	if dec.More() {
		WriteError(w, http.StatusBadRequest, "malformed JSON: trailing data after the object")
		return false
	}
	return true
}
