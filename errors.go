package strata

import (
	"encoding/base64"
	"errors"
	"unicode/utf8"
)

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }

// base64IfInvalid returns the standard base64 of s when s is not valid
// UTF-8, and "" otherwise: JSON output carries such names both lossily
// (as a string with U+FFFD) and exactly.
func base64IfInvalid(s string) string {
	if utf8.ValidString(s) {
		return ""
	}
	return base64.StdEncoding.EncodeToString([]byte(s))
}
