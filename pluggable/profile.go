// The profile of every device in use, merged into one pprof profile.

package pluggable

import (
	"fmt"
	"io"

	"github.com/google/pprof/profile"
	"github.com/streamalloc/streamalloc/mr"
)

// writeProfiles writes the merged live-allocation profiles of tracks (an
// empty profile when none).
func writeProfiles(w io.Writer, tracks []*mr.Tracking) error {
	var ps []*profile.Profile
	for _, t := range tracks {
		ps = append(ps, t.Profile())
	}
	if len(ps) == 0 {
		return nil
	}
	p, err := profile.Merge(ps)
	if err != nil {
		return fmt.Errorf("pluggable: merge profiles: %w", err)
	}
	return p.Write(w)
}
