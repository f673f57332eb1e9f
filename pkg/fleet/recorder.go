package fleet

import (
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// lateRecorders gives out event recorders that forward to the manager's, once set.
type lateRecorders struct {
	mu  sync.Mutex
	mgr manager.Manager
}

func (l *lateRecorders) set(mgr manager.Manager) {
	l.mu.Lock()
	l.mgr = mgr
	l.mu.Unlock()
}

func (l *lateRecorders) manager() manager.Manager {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mgr
}

func (l *lateRecorders) GetEventRecorderFor(name string) record.EventRecorder {
	return lateRecorder{l, name}
}

func (l *lateRecorders) GetEventRecorder(name string) events.EventRecorder {
	if mgr := l.manager(); mgr != nil {
		return mgr.GetEventRecorder(name)
	}
	return nil
}

// lateRecorder is the old events API's recorder (the one client-go's leader election uses).
type lateRecorder struct {
	l    *lateRecorders
	name string
}

func (r lateRecorder) recorder() record.EventRecorder {
	if mgr := r.l.manager(); mgr != nil {
		return mgr.GetEventRecorderFor(r.name) //nolint:staticcheck // client-go's leader election records with the old API
	}
	return nil
}

func (r lateRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	if rec := r.recorder(); rec != nil {
		rec.Event(obj, eventtype, reason, message)
	}
}

func (r lateRecorder) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	if rec := r.recorder(); rec != nil {
		rec.Eventf(obj, eventtype, reason, messageFmt, args...)
	}
}

func (r lateRecorder) AnnotatedEventf(obj runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...any) {
	if rec := r.recorder(); rec != nil {
		rec.AnnotatedEventf(obj, annotations, eventtype, reason, messageFmt, args...)
	}
}
