package remote

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/types"
)

func TestSubscriberCoalescesWithoutLoss(t *testing.T) {
	a := types.NamespacedName{Namespace: "a", Name: "a"}
	b := types.NamespacedName{Namespace: "b", Name: "b"}
	c := types.NamespacedName{Namespace: "c", Name: "c"}
	tests := map[string]struct {
		pushes []types.NamespacedName
		want   []types.NamespacedName
	}{
		"single":                    {[]types.NamespacedName{a}, []types.NamespacedName{a}},
		"duplicates coalesce":       {[]types.NamespacedName{a, a, a}, []types.NamespacedName{a}},
		"order of first pending":    {[]types.NamespacedName{b, a, b, c, a}, []types.NamespacedName{b, a, c}},
		"more than the buffer size": {manyKeys(3 * subscriberBuffer), manyKeys(3 * subscriberBuffer)},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := newSubscriber()
			for _, k := range tc.pushes { // nobody reads yet: pushes must not block or drop
				s.push(k)
			}
			done := make(chan struct{})
			go s.run(done)
			var got []types.NamespacedName
			for range tc.want {
				select {
				case k := <-s.out:
					got = append(got, k)
				case <-time.After(5 * time.Second):
					t.Fatalf("timed out after %d keys", len(got))
				}
			}
			select {
			case k := <-s.out:
				t.Errorf("unexpected extra key %v", k)
			case <-time.After(20 * time.Millisecond):
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("delivered (-want +got):\n%s", diff)
			}
			// A key pushed after delivery is delivered again.
			s.push(a)
			if k := <-s.out; k != a {
				t.Errorf("re-push delivered %v", k)
			}
			close(done)
			if _, open := <-s.out; open {
				t.Errorf("channel not closed after done")
			}
		})
	}
}

func manyKeys(n int) []types.NamespacedName {
	keys := make([]types.NamespacedName, n)
	for i := range keys {
		keys[i] = types.NamespacedName{Namespace: "ns", Name: string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))}
	}
	return keys
}
