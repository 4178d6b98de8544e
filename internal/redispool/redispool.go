// Package redispool shares go-redis clients across Caddy config reloads. Old
// and new configs run side by side during a reload; both acquire the client for
// the same URLs and get the same one, so a reload neither drops connections nor
// doubles them. The client is closed when its last user releases it.
//
// The clients are tuned for an edge proxy: every call is expected to carry a
// context deadline (which bounds dialing, writing and reading), and go-redis
// never retries a command on its own, because a retried non-idempotent script
// (a rate-limit debit, a stream append) could run twice.
package redispool

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.uber.org/zap"
)

// Timeouts for calls that carry no tighter context deadline. Callers on a
// request path bound each call with their own, much shorter, deadline.
const (
	dialTimeout = time.Second
	ioTimeout   = time.Second
	poolTimeout = time.Second
)

var clients = caddy.NewUsagePool()

var setLogger sync.Once

// debugLogger carries go-redis's own messages (a failed dial, a pool
// event) to Caddy's log at debug level: users of the client report the
// state changes that matter, once each, instead of one stderr line per dial.
type debugLogger struct{ l *zap.Logger }

func (d debugLogger) Printf(_ context.Context, format string, v ...any) {
	if ce := d.l.Check(zap.DebugLevel, "go-redis"); ce != nil {
		ce.Write(zap.String("message", fmt.Sprintf(format, v...)))
	}
}

// Acquire returns the shared client for urls: a *redis.Client for one URL, a
// *redis.ClusterClient (urls are its seed nodes) for several. URLs are
// redis:// or rediss://, as redis.ParseURL reads them. Callers must call
// release once when done, typically in their module's Cleanup; calling it
// again is a no-op. Creating a client does not connect: an unreachable server
// shows up in the first command, not here.
func Acquire(urls []string) (client redis.UniversalClient, release func() error, err error) {
	return AcquireFor("", urls)
}

// AcquireFor is Acquire for a client of its own, with its own connection
// pool, shared only by the callers that name the same purpose: a slow
// user (the review API reading large stream entries) then cannot take the
// connections the request path waits for. Acquire's client is purpose "".
func AcquireFor(purpose string, urls []string) (client redis.UniversalClient, release func() error, err error) {
	key, err := poolKey(urls)
	if err != nil {
		return nil, nil, err
	}
	if purpose != "" {
		key = purpose + "\x00" + key // no URL holds a NUL
	}
	setLogger.Do(func() { redis.SetLogger(debugLogger{caddy.Log().Named("redis")}) })
	v, _, err := clients.LoadOrNew(key, func() (caddy.Destructor, error) {
		c, err := NewClient(urls)
		if err != nil {
			return nil, err
		}
		return pooled{c}, nil
	})
	if err != nil {
		return nil, nil, err
	}
	var once sync.Once
	release = func() error {
		var err error
		once.Do(func() { _, err = clients.Delete(key) })
		return err
	}
	return v.(pooled).UniversalClient, release, nil
}

// pooled lets the usage pool close a client once nobody holds it.
type pooled struct{ redis.UniversalClient }

func (p pooled) Destruct() error { return p.Close() }

// poolKey identifies a client by its URL list, in order: the same list in a
// new config finds the client the old config made.
func poolKey(urls []string) (string, error) {
	if len(urls) == 0 {
		return "", errors.New("no redis URL")
	}
	return strings.Join(urls, "\n"), nil
}

// Validate checks urls as Acquire would, without creating a client.
func Validate(urls []string) error {
	_, _, err := options(urls)
	return err
}

// NewClient creates an unshared client for urls, tuned like the shared ones.
// Most callers want Acquire.
func NewClient(urls []string) (redis.UniversalClient, error) {
	single, cluster, err := options(urls)
	if err != nil {
		return nil, err
	}
	if cluster != nil {
		return redis.NewClusterClient(cluster), nil
	}
	return redis.NewClient(single), nil
}

// options parses urls into the options of a single-server client (one URL)
// or of a cluster client (several).
func options(urls []string) (*redis.Options, *redis.ClusterOptions, error) {
	if len(urls) == 0 {
		return nil, nil, errors.New("no redis URL")
	}
	parsed := make([]*redis.Options, len(urls))
	for i, u := range urls {
		o, err := parseURL(u)
		if err != nil {
			return nil, nil, err
		}
		parsed[i] = o
	}
	if len(parsed) == 1 {
		o := parsed[0]
		tune(o)
		return o, nil, nil
	}
	first := parsed[0]
	// Query settings of the first URL, tuned, apply to every node (node
	// clients inherit them). See ForKey for commands that must not be
	// redirected or retried by the cluster client.
	tune(first)
	c := &redis.ClusterOptions{
		MaxRetries:               first.MaxRetries,
		ContextTimeoutEnabled:    first.ContextTimeoutEnabled,
		DialerRetries:            first.DialerRetries,
		MaintNotificationsConfig: first.MaintNotificationsConfig,
		Username:                 first.Username,
		Password:                 first.Password,
		TLSConfig:                first.TLSConfig,
		ClientName:               first.ClientName,
		Protocol:                 first.Protocol,
		DialTimeout:              first.DialTimeout,
		ReadTimeout:              first.ReadTimeout,
		WriteTimeout:             first.WriteTimeout,
		PoolSize:                 first.PoolSize,
		PoolTimeout:              first.PoolTimeout,
		MinIdleConns:             first.MinIdleConns,
		MaxIdleConns:             first.MaxIdleConns,
		MaxActiveConns:           first.MaxActiveConns,
		ConnMaxIdleTime:          first.ConnMaxIdleTime,
		ConnMaxLifetime:          first.ConnMaxLifetime,
	}
	for i, o := range parsed {
		if o.DB != 0 {
			return nil, nil, fmt.Errorf("redis URL %d: Redis Cluster has no database %d (several URLs mean a cluster)", i+1, o.DB)
		}
		if o.Username != first.Username || o.Password != first.Password || (o.TLSConfig == nil) != (first.TLSConfig == nil) {
			return nil, nil, fmt.Errorf("redis URL %d: the seed nodes of one cluster must share credentials and scheme", i+1)
		}
		c.Addrs = append(c.Addrs, o.Addr)
	}
	return nil, c, nil
}

// parseURL accepts redis:// and rediss:// only; its errors never repeat the
// URL, which may hold a password.
func parseURL(raw string) (*redis.Options, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("invalid redis URL (want redis://[user:password@]host:port[/db])")
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, fmt.Errorf("redis URL scheme %q: want redis:// or rediss://", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("redis URL without a host")
	}
	// url.Parse takes any digits as a port; 0 would dial nowhere useful
	// and fail only at the first request.
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, fmt.Errorf("redis URL for host %s: port %s is not in 1..65535", u.Hostname(), p)
		}
	}
	o, err := redis.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid redis URL for host %s: %v", u.Host, err)
	}
	return o, nil
}

// tune applies the edge-proxy settings. Timeouts and pool sizes a URL's query
// sets (e.g. ?pool_size=50&read_timeout=200ms) are kept; retries, context
// deadlines and dial attempts are not negotiable.
func tune(o *redis.Options) {
	// -1 is go-redis's "no retries": a command that timed out may have run.
	o.MaxRetries = -1
	// The caller's context deadline bounds every call; without this flag
	// go-redis would bound socket I/O by ReadTimeout only.
	o.ContextTimeoutEnabled = true
	// One dial per attempt: callers that poll (health probes) bring their own
	// backoff, and a dial retried inside a 50ms budget only burns it.
	o.DialerRetries = 1
	if o.DialTimeout == 0 {
		o.DialTimeout = dialTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = ioTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = ioTimeout
	}
	if o.PoolTimeout == 0 {
		o.PoolTimeout = poolTimeout
	}
	// Maintenance notifications are a Redis Enterprise feature; on open-source
	// Redis the handshake only adds a round trip to every new connection.
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// ForKey returns the client that serves key: c itself for a single server,
// the master node owning key's slot for a cluster. Commands on the returned
// client run exactly once or fail: the cluster client would retry a command
// on network errors (up to MaxRedirects), which must not happen to a
// non-idempotent script. The slot map is cached, so this adds no round trip
// once the cluster client has loaded it.
func ForKey(ctx context.Context, c redis.Scripter, key string) (*redis.Client, error) {
	switch c := c.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	default:
		return nil, fmt.Errorf("unsupported redis client %T", c)
	}
}
