module sluice

go 1.26

require (
	github.com/BurntSushi/toml v1.5.0 // indirect
	github.com/gopacket/gopacket v1.3.1 // indirect
	github.com/pebbe/zmq4 v1.4.0 // indirect
	github.com/prometheus/client_golang v1.23.2 // indirect
	github.com/yalue/onnxruntime_go v1.27.0 // indirect
	golang.org/x/net v0.47.0 // indirect
	golang.org/x/sys v0.38.0 // indirect
	google.golang.org/protobuf v1.36.10 // indirect
)
