#!/usr/bin/env bash
# Checks that the machine's PostgreSQL and Redis answer, and says how to start them if not.
set -euo pipefail
pg_url="${TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
if ! node -e "
  const { Client } = require('pg');
  const c = new Client({ connectionString: process.argv[1], connectionTimeoutMillis: 3000 });
  c.connect().then(() => c.end()).catch(() => process.exit(1));
" "$pg_url" 2>/dev/null; then
  echo "PostgreSQL does not answer at $pg_url." >&2
  echo "Start it with: pg_ctlcluster --skip-systemctl-redirect \$(ls /etc/postgresql) main start" >&2
  exit 1
fi
if ! node -e "
  const s = require('net').connect(6379, '127.0.0.1');
  s.setTimeout(3000, () => process.exit(1));
  s.on('error', () => process.exit(1));
  s.on('connect', () => s.write('PING\r\n'));
  s.on('data', (d) => process.exit(String(d).startsWith('+PONG') ? 0 : 1));
"; then
  echo "Redis does not answer at 127.0.0.1:6379." >&2
  echo "Start it with: redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save '' --appendonly no" >&2
  exit 1
fi
