/**
 * `workbench console [--port P]`: the console page of the local cluster in the working directory
 * (.workbench/cluster.json), served on 127.0.0.1 until SIGTERM/SIGINT. The cluster is read once at start:
 * after a new `workbench up`, start the console again.
 *
 * Its URL carries its key. It goes to .workbench/console.url (0600), and is printed whole only to a
 * terminal: when standard output is a file or a pipe (a log), the line names the file instead.
 */
import { randomBytes } from 'node:crypto';
import { userInfo } from 'node:os';
import { relative } from 'node:path';
import { createPool } from '../../broker/db/pool.js';
import { createMainClient } from '../../broker/redis/clients.js';
import { fileFlagsAccess } from '../../flags/access.js';
import { defineCommand, type OptionSpec, type Parsed, portOption, UsageError } from '../args.js';
import { readCluster } from '../cluster/local.js';
import { localClusterRedis } from '../cluster/redis-target.js';
import { flipFlag } from '../console/flag-flip.js';
import { startConsoleServer } from '../console/server.js';
import { ClusterWatcher } from '../console/snapshot.js';
import { consoleUrlFile, removeConsoleUrl, writeConsoleUrl } from '../console/url-file.js';

export const DEFAULT_CONSOLE_PORT = 8090;

const OPTIONS = {
  port: { type: 'string', value: 'P', help: 'the port (default 8090; 0 picks a free one)' },
} as const satisfies OptionSpec;

export const consoleCommand = defineCommand({
  synopsis: ['console [--port P]'],
  about: `The local cluster's console page on 127.0.0.1 until SIGTERM/SIGINT; its URL (with its key) goes to
.workbench/console.url.`,
  options: OPTIONS,
  run: runConsoleCommand,
});

async function runConsoleCommand({ values, positionals }: Parsed<typeof OPTIONS>): Promise<number> {
  if (positionals.length > 0) throw new UsageError(`unexpected argument "${positionals[0]}"`);
  const port = portOption('--port', values.port, DEFAULT_CONSOLE_PORT);
  const cluster = readCluster();
  if (!cluster)
    throw new Error('no local cluster here (.workbench/cluster.json): start one with "workbench up"');

  const pool = createPool(cluster.databaseUrl, { max: 3, applicationName: 'workbench-console' });
  // The nodes' Redis, or their Redis Cluster (whose sharded channel a single-Redis publish never reaches).
  // Channels are named in full, so no key prefix; a push gives up after 2 s (the nodes' poll is the backstop).
  const redis = createMainClient(localClusterRedis(cluster), { keyPrefix: '', commandTimeoutMs: 2000 });
  redis.on('error', () => {}); // a flip still changes the file; the nodes' poll picks it up
  redis.connect().catch(() => {}); // it reconnects by itself
  // The local cluster always uses the file provider (its copy of the preset in .workbench/flags/).
  const flags = fileFlagsAccess(cluster.flagsDir, cluster.flagsEnv);
  const watcher = new ClusterWatcher(cluster, pool, flags);
  const actor = `console:${process.env.WORKBENCH_ACTOR ?? userInfo().username}`;

  // The console's own key (see cli/console/server.ts): whoever opens the printed URL, nobody else.
  const key = randomBytes(18).toString('base64url');
  let server: Awaited<ReturnType<typeof startConsoleServer>>;
  try {
    await watcher.start();
    server = await startConsoleServer(
      {
        adminToken: cluster.adminToken,
        key,
        snapshot: () => watcher.snapshot(),
        flip: async (request) => {
          const outcome = await flipFlag(
            { pool, redis, redisKeyPrefix: cluster.redisKeyPrefix, flags, environment: cluster.flagsEnv },
            request,
            actor,
          );
          const show = (on: boolean) => (on ? 'on' : 'off');
          console.log(
            `console: ${request.flag} ${show(outcome.previous)} → ${show(request.value)} by ${actor}${outcome.audited ? ', audited' : ''}`,
          );
          await watcher.refresh();
          return outcome;
        },
      },
      { port },
    );
  } catch (error) {
    await watcher.stop();
    redis.disconnect();
    await pool.end();
    throw error;
  }
  const urlWithKey = `${server.url}/?key=${key}`;
  writeConsoleUrl(urlWithKey);
  console.log(
    process.stdout.isTTY
      ? `console: ${urlWithKey} (peer page: ${server.url}/peer?key=${key}) for the ${cluster.flagsEnv} cluster`
      : `console: ${server.url}/ for the ${cluster.flagsEnv} cluster; open the URL in ${relative(process.cwd(), consoleUrlFile())} (yours only: it carries the console key, which no log shows)`,
  );

  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  removeConsoleUrl(urlWithKey);
  await server.close();
  await watcher.stop();
  redis.disconnect();
  await pool.end();
  return 0;
}
