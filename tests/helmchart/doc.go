// Package helmchart checks deploy/helm/mcpbus: rendered with Helm's own engine,
// every manifest decoded strictly into its Kubernetes API type. Its own module,
// outside go.work (Helm's dependency tree is large): `make helm-check`.
package helmchart
