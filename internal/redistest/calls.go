package redistest

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Calls sums how many times the masters behind cs served command (lower
// case, as INFO commandstats names it, e.g. "set"): with one request per
// master and attempt, the attempts made since an earlier count.
func Calls(ctx context.Context, cs []*redis.Client, command string) (int64, error) {
	var total int64
	for _, c := range cs {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, err
		}
		for line := range strings.Lines(info) {
			rest, ok := strings.CutPrefix(line, "cmdstat_"+command+":calls=")
			if !ok {
				continue
			}
			end := strings.IndexByte(rest, ',')
			if end < 0 {
				end = len(strings.TrimSpace(rest))
			}
			n, err := strconv.ParseInt(rest[:end], 10, 64)
			if err != nil {
				return 0, err
			}
			total += n
		}
	}
	return total, nil
}
