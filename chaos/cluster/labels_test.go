package cluster

import (
	"os"
	"strconv"
	"testing"
)

func TestOwnerGone(t *testing.T) {
	host, _ := os.Hostname()
	self := strconv.Itoa(os.Getpid())
	for _, tc := range []struct {
		owner string
		want  bool
	}{
		{host + "/" + self, false},            // this process
		{host + "/1", false},                  // init runs
		{host + "/2147483646", true},          // no such process
		{"some-other-host/2147483646", false}, // not ours to judge
		{"garbage", true},
		{host + "/x", true},
	} {
		if got := ownerGone(tc.owner, host); got != tc.want {
			t.Errorf("ownerGone(%q) = %v, want %v", tc.owner, got, tc.want)
		}
	}
}
