package trace

import "testing"

func TestFrameString(t *testing.T) {
	for _, tc := range []struct {
		f    Frame
		want string
	}{
		{Frame{Function: "forward", File: "train.py", Line: 42}, "forward (train.py:42)"},
		{Frame{Function: "forward", File: "train.py"}, "forward (train.py)"},
		{Frame{Function: "forward"}, "forward"},
		{Frame{File: "train.py", Line: 42}, "train.py:42"},
		{Frame{}, ""},
	} {
		if got := tc.f.String(); got != tc.want {
			t.Errorf("%#v: %q, want %q", tc.f, got, tc.want)
		}
	}
}
