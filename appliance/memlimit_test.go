package appliance

import (
	"context"
	"strings"
	"testing"

	"sluice/orchestrator"
)

// model_memory_mb: an IF whose model needs more than the limit fails to
// load, saying what it needs; the others serve.
func TestModelMemoryLimit(t *testing.T) {
	a, stop, _, _ := startControlled(t, `
[appliance]
log_level = "warn"
threads = 1
metrics = "off"
control = "ipc://%s"
model_memory_mb = 8
[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"
[[if]]
name = "small"
model_id = 1
model = "zoo:mlp"
[[if]]
name = "big"
model_id = 2
model = "zoo:resnet18"
`)
	defer stop()
	st, err := controlClient(t, a).Status(context.Background(), orchestrator.StatusArgs{})
	if err != nil || len(st.IFs) != 2 {
		t.Fatalf("status: %+v, %v", st, err)
	}
	for _, s := range st.IFs {
		switch s.Name {
		case "small":
			if s.State != "serving" {
				t.Errorf("the IF within the limit: %+v", s)
			}
		case "big":
			if s.State != "failed" || !strings.Contains(s.Error, "above its memory limit of 8.0 MiB") {
				t.Errorf("the IF above the limit: %+v", s)
			}
		default:
			t.Errorf("IF %q", s.Name)
		}
	}
}
