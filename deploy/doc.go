// Package deploy holds what operators import next to the gateway: the
// Grafana dashboard (grafana/systemone-gateway.json) and the Prometheus
// alerting rules (prometheus/alerts.yml, with promtool unit tests in
// prometheus/alerts_test.yml). Its tests check them against the real
// thing: promtool, and a real Prometheus scraping a real gateway under load
// that must answer every panel's query with data.
package deploy
