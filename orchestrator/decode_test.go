package orchestrator

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// BenchmarkDecodeDeploy measures request validation alone: parsing and
// checking a deploy request as the server does before calling a handler.
func BenchmarkDecodeDeploy(b *testing.B) {
	body := []byte(`{"id":"r-1","cmd":"deploy","args":{"name":"det","model_id":3,"model":"zoo:resnet18","class":"rt","slo_ms":25,"max_batch":16,"share":0.4}}`)
	cmds := commandTable()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		req, e := parseRequest(body, DefaultMaxRequestBytes)
		if e != nil {
			b.Fatal(e)
		}
		if _, e := cmds[req.Cmd].decode(req.Args); e != nil {
			b.Fatal(e)
		}
	}
}

// TestDescribeType covers the type names used in bad_request messages.
func TestDescribeType(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`{"id":"a","cmd":"deploy","args":{"name":"x","model_id":3,"model":"m","mean":"x"}}`, "args.mean: want an array, got string"},
		{`{"id":"a","cmd":"deploy","args":{"name":"x","model_id":3,"model":"m","max_batch":true}}`, "args.max_batch: want an integer, got bool"},
		{`{"id":"a","cmd":"deploy","args":{"name":"x","model_id":3,"model":"m","input_shape":[1.5]}}`, "args.input_shape: want an integer, got number 1.5"},
		{`{"id":"a","cmd":["status"]}`, "cmd: want a string, got array"},
	} {
		req, e := parseRequest([]byte(tc.body), DefaultMaxRequestBytes)
		if e == nil {
			_, e = commandTable()[req.Cmd].decode(req.Args)
		}
		if e == nil || e.Code != CodeBadRequest || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: %v, want %q", tc.body, e, tc.want)
		}
	}
}

// FuzzParseRequest feeds arbitrary frames to the server's validation:
// it must not panic, must refuse with bad_request or unknown_command, and
// what it accepts must survive a round trip through JSON unchanged.
func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","cmd":"status"}`,
		`{"id":"a","cmd":"deploy","args":{"name":"det","model_id":3,"model":"zoo:resnet18","class":"rt","slo_ms":25,"mean":[0.5],"input_shape":[3,224,224]}}`,
		`{"id":"a","cmd":"deploy","args":{"name":"ocr","model_id":1,"model":"onnx:/m/cls.onnx","backend":"ort","min_batch":2,"max_batch":16,"batching":"aimd","queue_len":64,"input":"u8-hwc","mean":[0.5,0.5,0.5],"std":[0.25,0.25,0.25],"auto_share":true,"policy":"none"}}`,
		`{"id":"a","cmd":"deploy","args":{"name":"g","model_id":2,"model":"zoo:vgg16","backend":"cuda","share":0.5,"mean":[],"std":null}}`,
		`{"id":"a","cmd":"deploy","args":{"name":"kws","model_id":4,"model":"zoo:kws","state":[{"input":"h","output":"h_out"},{"input":"c","output":"c_out"}],"state_idle_ms":500,"max_flows":16,"next":"cls"}}`,
		`{"id":"a","cmd":"deploy","args":{"name":"two","model_id":5,"model":"onnx:/m/two.onnx","inputs":["x","ids"],"outputs":["total","y"],"state":[]}}`,
		`{"id":"a","cmd":"deploy","args":{"name":"bad","model":"zoo:kws","state":[{"input":"h"}],"max_flows":-1,"next":"bad"}}`,
		`{"id":"a","cmd":"resize","args":{"name":"x","share":0.4}}`,
		`{"id":"a","cmd":"resize","args":{"name":"x","units":4}}`,
		`{"id":"a","cmd":"swap","args":{"name":"x","model":"zoo:m","max_batch":4}}`,
		`{"id":"a","cmd":"set-batch","args":{"name":"x","max_batch":8,"min_batch":2}}`,
		`{"id":"a","cmd":"reload-profile","args":{"path":"/p.toml"}}`,
		`{"id":"a","cmd":"drain","args":{"timeout_ms":100}}`,
		`{"id":"a","cmd":"remove","args":{"name":"x"}}`,
		`{"id":5}`, `[]`, `{"id":"a","cmd":"deploy","args":{"model_id":1e9}}`, "\xff",
	} {
		f.Add([]byte(s))
	}
	cmds := commandTable()
	f.Fuzz(func(t *testing.T, body []byte) {
		req, e := parseRequest(body, 4096)
		if e != nil {
			if e.Code != CodeBadRequest {
				t.Fatalf("parse error code %s", e.Code)
			}
			return
		}
		if req.ID == "" || len(req.ID) > MaxIDLen || req.Cmd == "" {
			t.Fatalf("accepted request %+v", req)
		}
		cmd, ok := cmds[req.Cmd]
		if !ok {
			return
		}
		args, e := cmd.decode(req.Args)
		if e != nil {
			if e.Code != CodeBadRequest {
				t.Fatalf("decode error code %s", e.Code)
			}
			return
		}
		again, err := json.Marshal(args)
		if err != nil {
			t.Fatal(err)
		}
		args2, e := cmd.decode(again)
		if e != nil {
			t.Fatalf("re-encoded args %s refused: %v", again, e)
		}
		if !reflect.DeepEqual(args, args2) {
			t.Fatalf("round trip changed args: %#v -> %#v", args, args2)
		}
	})
}
