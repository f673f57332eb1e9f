package sync

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Pacing defaults: 10 % of the pool's Nodes (at least 1) every 2 minutes.
const (
	DefaultNoExecutePercent  = 10
	DefaultNoExecuteInterval = 2 * time.Minute
	// MaxNoExecuteInterval bounds the interval annotation: a longer wait is
	// more likely a typo ("2h" for "2m") than a plan.
	MaxNoExecuteInterval = 24 * time.Hour
)

// CodeInvalidPacing is the refusal code of a bad pacing annotation.
const CodeInvalidPacing = "InvalidPacing"

// Pacing says how a pool's new or changed NoExecute taints reach the Nodes
// that already exist. A NoExecute taint evicts every pod that does not
// tolerate it, at once and regardless of PodDisruptionBudgets, so it goes to
// Batch Nodes (and their Machines) at a time, Interval apart.
type Pacing struct {
	// All: no pacing, every Node at once.
	All bool
	// Count, if > 0, is the batch size; otherwise Percent of the pool's Nodes.
	Count, Percent int
	Interval       time.Duration
	// Window, if set, is when batches may start (AnnotationNoExecuteWindow).
	Window *Window
}

// DefaultPacing is the pacing of a pool without annotations.
var DefaultPacing = Pacing{Percent: DefaultNoExecutePercent, Interval: DefaultNoExecuteInterval}

// BatchSize is the batch for a pool of nodes Nodes: Count, or Percent of
// nodes rounded down, and at least 1.
func (p Pacing) BatchSize(nodes int) int {
	if p.All {
		return max(nodes, 1)
	}
	if p.Count > 0 {
		return p.Count
	}
	return max(1, nodes*p.Percent/100)
}

// String says the pacing for people: "2 Nodes every 5s", "10% of Nodes
// every 2m0s", "all at once".
func (p Pacing) String() string {
	var s string
	switch {
	case p.All:
		s = "all at once"
	case p.Count > 0:
		s = fmt.Sprintf("%d Node%s at a time every %s", p.Count, plural(p.Count), p.Interval)
	default:
		s = fmt.Sprintf("%d%% of Nodes (at least 1) at a time every %s", p.Percent, p.Interval)
	}
	if p.Window != nil {
		s += fmt.Sprintf(", batches starting only in the window %q", p.Window.Spec)
	}
	return s
}

// PacingFromAnnotations reads a MachinePool's pacing annotations over
// DefaultPacing. A bad value is a *ValidationError with CodeInvalidPacing:
// the pool is refused, as any bad pool input.
func PacingFromAnnotations(annotations map[string]string) (Pacing, error) {
	p := DefaultPacing
	var problems []Problem
	bad := func(key, value, reason string) {
		problems = append(problems, Problem{Field: "metadata.annotations[" + key + "]", Value: value, Code: CodeInvalidPacing, Reason: reason})
	}
	if v, ok := annotations[AnnotationNoExecuteBatch]; ok {
		s := strings.TrimSpace(v)
		switch {
		case s == "all":
			p.All = true
		case strings.HasSuffix(s, "%"):
			n, err := strconv.Atoi(strings.TrimSuffix(s, "%"))
			if err != nil || n < 1 || n > 100 {
				bad(AnnotationNoExecuteBatch, v, "want a count (\"3\"), a percentage from 1% to 100% (\"25%\") or \"all\"")
			} else {
				p.Count, p.Percent = 0, n
			}
		default:
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				bad(AnnotationNoExecuteBatch, v, "want a count of at least 1 (\"3\"), a percentage (\"25%\") or \"all\"")
			} else {
				p.Count = n
			}
		}
	}
	if v, ok := annotations[AnnotationNoExecuteInterval]; ok {
		s := strings.TrimSpace(v)
		if s == "all" {
			p.All = true
		} else if d, err := time.ParseDuration(s); err != nil || d < 0 || d > MaxNoExecuteInterval {
			bad(AnnotationNoExecuteInterval, v, fmt.Sprintf("want a duration from 0s to %s (\"2m\", \"30s\") or \"all\"", MaxNoExecuteInterval))
		} else {
			p.Interval = d
		}
	}
	if v, ok := annotations[AnnotationNoExecuteWindow]; ok {
		w, err := ParseWindow(v)
		if err != nil {
			bad(AnnotationNoExecuteWindow, v, err.Error())
		} else {
			p.Window = w
		}
	}
	if len(problems) > 0 {
		return Pacing{}, &ValidationError{Problems: problems}
	}
	return p, nil
}

// PacedTaints are the taints of d whose arrival is paced: its NoExecute
// ones. Adding one, or changing its value, evicts pods; removing one, and
// every other item, is applied at once.
// Like the planner, it keeps the first of two with the same key.
func PacedTaints(d Desired) []corev1.Taint {
	var out []corev1.Taint
	for _, t := range d.Taints {
		if t.Effect == corev1.TaintEffectNoExecute && !slices.ContainsFunc(out, func(o corev1.Taint) bool { return o.Key == t.Key }) {
			out = append(out, corev1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect})
		}
	}
	return out
}

// Progress is where one Target stands in a paced rollout.
type Progress int

const (
	// ProgressExempt: the Machine has no Node yet (no nodeRef, and not
	// Running); nothing runs there to evict, and its Node will join with the
	// taint, so it is not paced.
	ProgressExempt Progress = iota
	// ProgressDone: the Machine and its Node hold every paced taint with
	// the pool's value.
	ProgressDone
	// ProgressStarted: for some paced taint, one of them holds it with the
	// pool's value and the other does not (a batch interrupted by a failure
	// or a restart, or a copy by nodelink): it is finished without waiting.
	ProgressStarted
	// ProgressPending: some paced taint is on neither with the pool's value,
	// and none is on one side only.
	ProgressPending
)

// ProgressOf says where t stands for the paced taints of d. Done when
// there are none.
func ProgressOf(d Desired, t Target) Progress {
	paced := PacedTaints(d)
	if len(paced) == 0 {
		return ProgressDone
	}
	if t.Node == nil && t.NodeSkip == NodeSkipNoNodeRef && !running(t) {
		return ProgressExempt
	}
	done := true
	for _, p := range paced {
		onMachine := holds(t.Machine.Spec.Taints, p)
		onNode := onMachine // a Node this controller does not write is left to nodelink
		if t.Node != nil {
			onNode = holds(t.Node.Spec.Taints, p)
		}
		if onMachine != onNode {
			return ProgressStarted
		}
		done = done && onMachine
	}
	if done {
		return ProgressDone
	}
	return ProgressPending
}

// running reports whether the Machine says it is Running: its Node exists
// even if the nodeRef is not set yet.
func running(t Target) bool {
	return t.Machine.Status.Phase != nil && *t.Machine.Status.Phase == "Running"
}

// HeldBy reports whether t's Machine and, if it has one, its Node hold p
// with its value.
func HeldBy(t Target, p corev1.Taint) bool {
	return holds(t.Machine.Spec.Taints, p) && (t.Node == nil || holds(t.Node.Spec.Taints, p))
}

// holds reports whether taints hold p with its value.
func holds(taints []corev1.Taint, p corev1.Taint) bool {
	for _, t := range taints {
		if t.Key == p.Key && t.Effect == p.Effect && t.Value == p.Value {
			return true
		}
	}
	return false
}

// DeferringFor returns d with the paced taints that neither t's Machine nor
// its Node holds with the pool's value held back: on an object planned with
// it, such a taint is neither added nor changed, and nothing about it is
// removed or newly recorded as owned. The ones on one side only are
// finished, and everything else of d applies.
func (d Desired) DeferringFor(t Target) Desired {
	for _, p := range PacedTaints(d) {
		if !holds(t.Machine.Spec.Taints, p) && (t.Node == nil || !holds(t.Node.Spec.Taints, p)) {
			if d.Deferred == nil {
				d.Deferred = map[string]bool{}
			}
			d.Deferred[taintID(p)] = true
		}
	}
	return d
}

// PacedDesired is the Desired target t is planned with in one round of a
// paced rollout, given its Progress and whether a batch took it (Admit, or a
// batch in flight): a Pending target taken by a batch gets everything; a
// Pending one not taken, and a Started one, get everything but the paced
// taints they hold on neither side; Done and Exempt ones get everything.
func PacedDesired(d Desired, t Target, p Progress, taken bool) Desired {
	if (p == ProgressPending && !taken) || p == ProgressStarted {
		return d.DeferringFor(t)
	}
	return d
}

// Admit chooses which targets are written in full this round, given each
// one's Progress and the number of Pending ones a new batch may take (0 while
// the interval runs). Exempt, Done and Started targets are always admitted:
// writing them evicts nothing new. While any target is Started, no new
// Pending one is admitted, so that a batch interrupted by a failure or a
// restart is finished before the next begins and two never overlap. Pending
// targets are taken in order (the caller's order: Machine name).
func Admit(progress []Progress, batch int) []bool {
	return AdmitPreferring(progress, batch, nil)
}

// AdmitPreferring is Admit taking the Pending targets that prefer marks
// before the others (nil prefers none): the NoExecute health gate puts
// ready, schedulable Nodes first, so that a sick Node is tainted only once
// no healthy one waits.
func AdmitPreferring(progress []Progress, batch int, prefer []bool) []bool {
	admit := make([]bool, len(progress))
	started := false
	for i, p := range progress {
		admit[i] = p != ProgressPending
		started = started || p == ProgressStarted
	}
	if started {
		return admit
	}
	for _, preferred := range []bool{true, false} {
		for i, p := range progress {
			if batch <= 0 {
				return admit
			}
			if p == ProgressPending && !admit[i] && (prefer != nil && prefer[i]) == preferred {
				admit[i] = true
				batch--
			}
		}
	}
	return admit
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
