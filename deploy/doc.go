// Package deploy holds no production code: its tests validate the deployment files next to it
// (Dockerfile, docker-compose.yml, kubernetes/, grafana/) statically, so that a typo, an unknown
// environment variable or a broken cross-reference fails `go test` rather than a rollout.
// docs/deployment.md describes the files.
package deploy
