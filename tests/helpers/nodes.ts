/**
 * The tests' one way of starting broker nodes (issue 29, item 4): `startNode` / `startNodes`, in this test
 * process (`'in-process'`: `startBroker`, so a test can reach the node's app, metrics and typed events) or as
 * `workbench broker` processes (`'process'`: cli/cluster/broker-process.ts `BrokerProcess`, so a test can
 * kill it, read its output, see it exit). Both kinds share one interface: `url`, `wsUrl`, `admin()`,
 * `stop()`, and `waitForSwitch()` to wait on the node's "row switched" event (the typed event in process,
 * the structured log line of a process). `TestCluster` (tests/helpers/cluster.ts) and the contract `World`
 * (tests/contract/harness.ts) are thin wrappers over these; nothing else in tests/ starts a broker.
 */

import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { pino } from 'pino';
import { type BrokerNode, startBroker } from '../../broker/app.js';
import { loadConfig } from '../../broker/config.js';
import { BROKER_ROLE, databaseUrlAs } from '../../broker/db/roles.js';
import type { Logger } from '../../broker/log.js';
import { BrokerProcess, workbenchMain } from '../../cli/cluster/broker-process.js';
import type { FlagKey } from '../../flags/registry.js';
import { TEST_BUS_SECRET } from './bus-secret.js';
import { freePort } from './ports.js';
import { waitFor } from './wait.js';

export const ADMIN_TOKEN = 'test-admin-token-0123456789';

export type NodeKind = 'in-process' | 'process';
type Implementation = 'local' | 'shared';

/** What every started node offers, whichever its kind. */
export interface StartedNode {
  readonly kind: NodeKind;
  readonly nodeId: string;
  /** `http://127.0.0.1:port` of the node. */
  readonly url: string;
  /** Its WebSocket endpoint (`/ws`). */
  readonly wsUrl: string;
  /** fetch against this node's admin API with the admin token (`token: null`: none). */
  admin(path: string, init?: { method?: string; body?: unknown; token?: string | null }): Promise<Response>;
  /** Drains and stops the node (in process: `BrokerNode.stop`; a process: SIGTERM, SIGKILL after a grace). */
  stop(): Promise<void>;
  /** Resolves once the node reported that `flag`'s row uses `using`; rejects after `timeoutMs`. */
  waitForSwitch(flag: FlagKey, using: Implementation, timeoutMs?: number): Promise<void>;
}

/** A node in this test process: also the whole `BrokerNode` (app, metrics, typed `events`). */
export interface InProcessNode extends StartedNode, Omit<BrokerNode, 'stop'> {
  readonly kind: 'in-process';
}

/** A `workbench broker` process: also its child process, its output, its end; it can be killed. */
export interface ProcessNode extends StartedNode {
  readonly kind: 'process';
  readonly process: ChildProcess;
  /** Its stdout and stderr so far. */
  output(): string;
  /** Resolves with the exit code (or signal name) once the process is gone, all its output read. */
  readonly exited: Promise<number | string | null>;
  /** Sends `signal` (default SIGKILL: a crash) and resolves once the process is gone. */
  kill(signal?: NodeJS.Signals): Promise<number | string | null>;
  /** Resolves with the first structured (JSON) log line matching `match`, already printed or to come. */
  waitForLog(
    match: (line: Record<string, unknown>) => boolean,
    timeoutMs?: number,
  ): Promise<Record<string, unknown>>;
}

export type TestNodeOf<K extends NodeKind> = K extends 'in-process' ? InProcessNode : ProcessNode;

export interface NodeOptions<K extends NodeKind> {
  kind: K;
  databaseUrl: string;
  /** Broker variables (README § Configuration), over the defaults of the kind. */
  env?: Record<string, string>;
  /** In process only: replaces the (silent unless TEST_LOG_LEVEL) logger. */
  log?: Logger;
}

/** How long a start may take before the fixture gives up on it. */
const PROCESS_START_TIMEOUT_MS = 20_000;
const SWITCH_TIMEOUT_MS = 15_000;

/**
 * What a test node connects as: the brokers' least-privilege role (docs/design.md § Database roles), so every
 * test that starts a node shows the role's grants suffice; the URL's own role only when the node is to
 * migrate (MIGRATE_ON_START, which needs the owner) or the test names DATABASE_URL itself.
 */
function nodeDatabaseUrl(options: NodeOptions<NodeKind>): string {
  const migrates = /^(1|true|yes|on)$/i.test(options.env?.MIGRATE_ON_START ?? '');
  return (
    options.env?.DATABASE_URL ??
    (migrates ? options.databaseUrl : databaseUrlAs(options.databaseUrl, BROKER_ROLE))
  );
}

/** One node of `kind` on a free port against `databaseUrl`. */
export function startNode<K extends NodeKind>(options: NodeOptions<K>): Promise<TestNodeOf<K>> {
  const started =
    options.kind === 'in-process'
      ? startInProcess(options as NodeOptions<'in-process'>)
      : startProcess(options as NodeOptions<'process'>);
  return started as Promise<TestNodeOf<K>>;
}

/**
 * `count` nodes of one cluster: one database, one Redis prefix (`REDIS_KEY_PREFIX` of `env`, or a fresh
 * one), node ids `<idPrefix>-0`, `-1`, … unless `env` names one; started one after the other (a second
 * node's start sees the first node's rows, as in a rolling start).
 */
export async function startNodes<K extends NodeKind>(
  options: NodeOptions<K> & { count: number; idPrefix?: string },
): Promise<Array<TestNodeOf<K>>> {
  const prefix = options.env?.REDIS_KEY_PREFIX ?? `wbtest:${randomBytes(4).toString('hex')}:`;
  const idPrefix = options.idPrefix ?? `node-${randomBytes(2).toString('hex')}`;
  const nodes: Array<TestNodeOf<K>> = [];
  for (let i = 0; i < options.count; i++) {
    const env = { NODE_ID: `${idPrefix}-${i}`, ...options.env, REDIS_KEY_PREFIX: prefix };
    nodes.push(await startNode({ ...options, env }));
  }
  return nodes;
}

async function startInProcess(options: NodeOptions<'in-process'>): Promise<InProcessNode> {
  const config = loadConfig({
    DATABASE_URL: nodeDatabaseUrl(options),
    REDIS_URL: 'redis://127.0.0.1:6379',
    REDIS_KEY_PREFIX: `wbtest:${randomBytes(4).toString('hex')}:`,
    PORT: '0',
    NODE_ID: `test-${randomBytes(3).toString('hex')}`,
    ADMIN_TOKEN,
    BUS_SECRET: TEST_BUS_SECRET,
    ...options.env,
  });
  const log =
    options.log ?? pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent', base: { node: config.nodeId } });
  const node = await startBroker(config, { log });
  const { events } = node;
  return {
    ...node,
    kind: 'in-process',
    wsUrl: `${node.url.replace(/^http/, 'ws')}/ws`,
    admin: adminOf(node.url).admin,
    waitForSwitch(flag, using, timeoutMs = SWITCH_TIMEOUT_MS) {
      if (events.using(flag) === using) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => {
          events.off('row.switched', onSwitched);
          reject(new Error(`${node.nodeId}: ${flag} did not switch to ${using} within ${timeoutMs} ms`));
        }, timeoutMs);
        const onSwitched = (event: { flag: FlagKey; using: string }) => {
          if (event.flag !== flag || event.using !== using) return;
          clearTimeout(timer);
          events.off('row.switched', onSwitched);
          resolve();
        };
        events.on('row.switched', onSwitched);
      });
    },
  };
}

async function startProcess(options: NodeOptions<'process'>): Promise<ProcessNode> {
  requireBuild();
  const port = await freePort();
  const nodeId = options.env?.NODE_ID ?? `proc-${port}`;
  const broker = BrokerProcess.spawn({
    port,
    env: {
      DATABASE_URL: nodeDatabaseUrl(options),
      NODE_ID: nodeId,
      ADMIN_TOKEN,
      BUS_SECRET: TEST_BUS_SECRET,
      REDIS_KEY_PREFIX: `wbtest:${nodeId}:`,
      LOG_LEVEL: 'info',
      ...options.env,
    },
    output: 'pipe',
  });
  const { output, exited } = captured(broker.child);
  let gone = false;
  void exited.then(() => {
    gone = true;
  });
  try {
    await broker.waitHealthy(PROCESS_START_TIMEOUT_MS, {
      intervalMs: 25,
      only200: true,
      // Found dead once all its output is read ('close'), so the error shows why it died.
      isDead: () => gone,
      deadError: () => new Error(`broker exited during start:\n${output()}`),
    });
  } catch (error) {
    broker.kill(); // never leave a half-started broker behind
    throw error;
  }
  const waitForLog: ProcessNode['waitForLog'] = (match, timeoutMs = SWITCH_TIMEOUT_MS) =>
    waitFor(() => loggedLines(output()).find(match), {
      timeoutMs,
      intervalMs: 25,
      what: `${nodeId}: a log line matching ${match.toString()}`,
    });
  return {
    kind: 'process',
    process: broker.child,
    nodeId,
    url: broker.url,
    wsUrl: broker.wsUrl,
    output,
    exited,
    admin: adminOf(broker.url).admin,
    stop: () => broker.stop(),
    kill(signal = 'SIGKILL') {
      if (!gone) broker.child.kill(signal);
      return exited;
    },
    waitForLog,
    async waitForSwitch(flag, using, timeoutMs) {
      // The reconciler's 'row switched' line (broker/rows/reconciler.ts), the process's row.switched event.
      await waitForLog(
        (line) => line.msg === 'row switched' && line.flag === flag && line.using === using,
        timeoutMs,
      );
    },
  };
}

/** The JSON lines of a process's output (pino), skipping whatever else it printed. */
function loggedLines(output: string): Array<Record<string, unknown>> {
  const lines: Array<Record<string, unknown>> = [];
  for (const line of output.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      lines.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // a line cut by the read so far: the next look sees it whole
    }
  }
  return lines;
}

/** Process tests run the compiled `workbench`: say so plainly when it is not built. */
export function requireBuild(): void {
  const main = workbenchMain();
  if (!existsSync(main)) throw new Error(`${main} is missing: run "npm run build" first`);
}

/** The admin API of a node at `url` (in this process or not), with the test admin token. */
export function adminOf(url: string): Pick<StartedNode, 'admin'> {
  return {
    admin(path, init = {}) {
      const token = init.token === undefined ? ADMIN_TOKEN : init.token;
      const headers: Record<string, string> = {};
      if (token !== null) headers.authorization = `Bearer ${token}`;
      if (init.body !== undefined) headers['content-type'] = 'application/json';
      return fetch(`${url}${path}`, {
        method: init.method ?? (init.body === undefined ? 'GET' : 'POST'),
        headers,
        body: init.body === undefined ? undefined : JSON.stringify(init.body),
      });
    },
  };
}

/** A child process's stdout and stderr together, and its end (exit code or signal name), all output read. */
export function captured(child: ChildProcess): {
  output: () => string;
  exited: Promise<number | string | null>;
} {
  let output = '';
  child.stdout?.on('data', (chunk) => {
    output += chunk;
  });
  child.stderr?.on('data', (chunk) => {
    output += chunk;
  });
  // 'close', not 'exit': 'exit' can come before the last of its output has been read from the pipes, and
  // what a test reads once the process ended must be all it printed.
  const exited = new Promise<number | string | null>((resolve) =>
    child.on('close', (code, signal) => resolve(code ?? signal)),
  );
  return { output: () => output, exited };
}
