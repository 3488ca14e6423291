module github.com/toolmesh/toolmesh/deploy/k8s/tools

go 1.26

require sigs.k8s.io/yaml v1.6.0

require go.yaml.in/yaml/v2 v2.4.2 // indirect
