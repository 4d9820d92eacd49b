package engine

import (
	"crypto/sha256"
	"encoding/base32"
	"strings"
)

// A hold's short id is how a Slack thread names it: the first six
// characters of the SHA-256 of its id, in the lower-case base32 "extended
// hex" alphabet the ids use (0-9, a-v). It is no piece of the id itself:
// ids are time-ordered, so holds opened together share most of their
// beginning, and a run's Token budget hold and its output review share all
// of the id but a suffix. Six characters (30 bits) make two holds of one
// thread sharing a short id rare; a surface listing holds by short id shows
// such holds by full id instead.

// ShortHoldIDLen is the length of a hold's short id.
const ShortHoldIDLen = 6

// ShortHoldID is hold id's short id (see above).
func ShortHoldID(id string) string {
	sum := sha256.Sum256([]byte(id))
	return strings.ToLower(base32.HexEncoding.EncodeToString(sum[:]))[:ShortHoldIDLen]
}
