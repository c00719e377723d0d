package cuda

import (
	"slices"
	"sync"
)

// reef-pad's plumbing (runReef with pad): the BE clients' jobs as
// padding sees them, and the list of the suspended ones that the RT
// clients' padded runs take their candidates from.
//
// A BE job is suspended from the moment its preempted Run returns (its
// resume point is then published, before the gate adds it to the list)
// until its gate lets its next run start, which it does only when no RT
// job is pending: so a suspended job's instance never runs while an RT
// run pads with it, and the resume point the job restores from is the
// one the last padded launch left.
type padLender struct {
	mu   *sync.Mutex // the reef scheduler's: guards susp and next
	susp []*dclient
	next int
}

// newPadLender wires the clients: BE clients get a PadJob, RT clients
// the lender's job list.
func newPadLender(mu *sync.Mutex, clients []*dclient) *padLender {
	l := &padLender{mu: mu}
	for _, c := range clients {
		if c.c.RT {
			c.padJobs = l.jobs
		} else {
			c.pj = &PadJob{Inst: c.inst, Batch: 1}
		}
	}
	return l
}

// suspend adds a preempted BE client (the scheduler's mutex held).
func (l *padLender) suspend(c *dclient) {
	if !slices.Contains(l.susp, c) {
		l.susp = append(l.susp, c)
	}
}

// resume removes a BE client about to run (the scheduler's mutex held).
func (l *padLender) resume(c *dclient) {
	l.susp = slices.DeleteFunc(l.susp, func(x *dclient) bool { return x == c })
}

// jobs is RunPadded's source: the suspended jobs, starting one further
// each call (round robin: the selector prefers the first ones).
func (l *padLender) jobs() []*PadJob {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.susp)
	if n == 0 {
		return nil
	}
	out := make([]*PadJob, n)
	for k := range out {
		out[k] = l.susp[(l.next+k)%n].pj
	}
	l.next++
	return out
}

// disbProfile installs m's kernel profile at batch 1 for reef-pad: the
// one given for its role, or one measured now (also when the given one
// does not fit the model's plan: another size, another device). It says
// which.
func disbProfile(m *disbModel, given *Profile) (string, error) {
	note := ""
	if given != nil {
		if mp := given.Find(m.spec.Role, 1); mp != nil {
			err := m.base.SetKernelProfile(mp)
			if err == nil {
				return "given", nil
			}
			note = ", the given one did not fit"
		}
	}
	mp, err := m.base.ProfileKernels(1, 0)
	if err != nil {
		return "", err
	}
	if err := m.base.SetKernelProfile(mp); err != nil {
		return "", err
	}
	return "measured (" + mp.Timing + note + ")", nil
}
