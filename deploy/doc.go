// Package deploy holds what operators import next to the gateway: the
// Grafana dashboard (grafana/systemone-gateway.json), the Prometheus
// alerting rules (prometheus/alerts.yml, with promtool unit tests in
// prometheus/alerts_test.yml) and a scrape config that loads them and
// scrapes the gateway's metrics site (prometheus/prometheus.yml). Its tests
// check them against the real thing: promtool, and a real Prometheus
// scraping a real gateway, under load for the dashboard, whose every panel
// must answer its query with data.
package deploy
