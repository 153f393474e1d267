/**
 * The console as an attacker on the same machine meets it (issue 17, item 9): a real `workbench up` and
 * `workbench console` whose output goes to a log under .workbench/logs/, as `npm start` runs it.
 *
 * - Another account reads logs: no log holds the console key, and the state folder and the logs the
 *   workbench writes are the owner's only.
 * - A page of another loopback server rides the operator's cookie (SameSite does not tell ports apart): a
 *   POST with the key cookie and `Origin: http://127.0.0.1:<other port>` is a 403 and changes nothing.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import {
  closeSync,
  existsSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
} from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClusterFile } from '../../cli/cluster/local.js';
import { runWorkbench, WORKBENCH } from '../helpers/cli.js';
import { FAST_CLUSTER } from '../helpers/cluster.js';
import { freePort } from '../helpers/ports.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let cwd: string;
let cluster: ClusterFile;
let consoleProcess: ChildProcess | undefined;
let consoleUrl: string;
let consoleKey: string;
let umaskBefore: number;

const state = (...parts: string[]) => join(cwd, '.workbench', ...parts);
const consoleLog = () => state('logs', 'console.log');
const mode = (path: string) => statSync(path).mode & 0o777;
const flagsFile = () => join(cluster.flagsDir, `${cluster.flagsEnv}.json`);

/** An HTTP request with exactly the headers given (fetch would add its own). */
function send(
  method: string,
  path: string,
  headers: Record<string, string>,
  body = '',
): Promise<{ status: number; body: string }> {
  const url = new URL(path, consoleUrl);
  return new Promise((resolve, reject) => {
    const outgoing = request(
      { host: url.hostname, port: url.port, path: url.pathname + url.search, method, headers },
      (response) => {
        let text = '';
        response.setEncoding('utf8');
        response.on('data', (chunk: string) => {
          text += chunk;
        });
        response.on('end', () => resolve({ status: response.statusCode ?? 0, body: text }));
      },
    );
    outgoing.on('error', reject);
    outgoing.end(body);
  });
}

beforeAll(async () => {
  // The usual umask of a login shell: whatever the workbench creates is world-readable unless it says so.
  umaskBefore = process.umask(0o022);
  db = await createTestDatabase('console_security');
  cwd = mkdtempSync(join(tmpdir(), 'wb-console-security-'));
  const up = await runWorkbench(
    ['up', '--phase', '0', '--port', '0', '--database-url', db.url],
    FAST_CLUSTER,
    cwd,
  );
  expect(up.code, up.stderr).toBe(0);
  cluster = JSON.parse(readFileSync(state('cluster.json'), 'utf8')) as ClusterFile;

  // `npm start`'s redirect to the log, opened as a shell opens it (0644 under this umask).
  const log = openSync(consoleLog(), 'w');
  consoleProcess = spawn(process.execPath, [WORKBENCH, 'console', '--port', '0'], {
    cwd,
    stdio: ['ignore', log, log],
  });
  closeSync(log);
  const exited = new Promise<never>((_, reject) =>
    consoleProcess!.once('exit', (code) =>
      reject(new Error(`workbench console exited (${code}):\n${readFileSync(consoleLog(), 'utf8')}`)),
    ),
  );
  const printed = waitFor(
    () => readFileSync(consoleLog(), 'utf8').match(/console: (http:\/\/127\.0\.0\.1:\d+)/),
    {
      timeoutMs: 30_000,
      what: 'the console line in its log',
    },
  );
  consoleUrl = (await Promise.race([printed, exited]))[1]!;
  // The key from where the console leaves it for its owner; an older console printed it in its output
  // (then this test fails on its assertions below, not here).
  const withKey = existsSync(state('console.url'))
    ? readFileSync(state('console.url'), 'utf8')
    : readFileSync(consoleLog(), 'utf8');
  consoleKey = withKey.match(/\?key=([\w-]+)/)![1]!;
}, 90_000);

afterAll(async () => {
  if (consoleProcess && consoleProcess.exitCode === null) {
    const exited = new Promise((resolve) => consoleProcess!.once('exit', resolve));
    consoleProcess.kill('SIGTERM');
    await exited;
  }
  if (cwd) {
    await runWorkbench(['down'], {}, cwd);
    rmSync(cwd, { recursive: true, force: true });
  }
  await db?.drop();
  process.umask(umaskBefore);
}, 60_000);

describe('workbench console against a cross-origin page on loopback', () => {
  it('a POST with the key cookie and Origin: http://127.0.0.1:<other port> is a 403 and flips nothing', async () => {
    const before = readFileSync(flagsFile(), 'utf8');
    expect(JSON.parse(before).flags['ha.audit']).toBe(false);
    const otherPort = await freePort();
    const cookie = `wb_console_key=${consoleKey}`;
    const flip = '{"flag":"ha.audit","value":true}';
    // What a page on another port can send without a preflight: fetch(…, {mode: 'no-cors'}) with a
    // text/plain body, or a form.
    const fromOtherPort = await send(
      'POST',
      '/api/flags',
      { cookie, origin: `http://127.0.0.1:${otherPort}`, 'content-type': 'text/plain' },
      flip,
    );
    expect(fromOtherPort.status).toBe(403);
    expect(JSON.parse(fromOtherPort.body)).toEqual({
      error: 'cross_origin',
      message: `refused: this request comes from http://127.0.0.1:${otherPort}, not from the console (${consoleUrl} or ${consoleUrl.replace('127.0.0.1', 'localhost')})`,
    });
    // The same without Origin (a browser that hides it, a same-site Sec-Fetch-Site, a foreign Referer).
    const withoutOrigin: Record<string, string>[] = [
      {},
      { 'sec-fetch-site': 'same-site' },
      { referer: `http://localhost:${otherPort}/decoy.html` },
    ];
    for (const headers of withoutOrigin) {
      const refused = await send(
        'POST',
        '/api/flags',
        { cookie, 'content-type': 'text/plain', ...headers },
        flip,
      );
      expect(refused.status, JSON.stringify(headers)).toBe(403);
    }
    expect(readFileSync(flagsFile(), 'utf8')).toBe(before);
    const audited = await db.query("SELECT 1 FROM audit_log WHERE event_type = 'flag.changed'");
    expect(audited.rowCount).toBe(0);

    // The console's own page, same cookie: the refusals above were for the origin, not the key.
    const own = await send(
      'POST',
      '/api/flags',
      { cookie, origin: consoleUrl, 'content-type': 'application/json' },
      flip,
    );
    expect(own.status, own.body).toBe(200);
    expect(JSON.parse(readFileSync(flagsFile(), 'utf8')).flags['ha.audit']).toBe(true);
  });

  it("no log holds the console key, and the state folder and the logs it writes are the owner's only", () => {
    const logs = readdirSync(state('logs'));
    expect(logs).toEqual(expect.arrayContaining(['console.log', 'broker-1.log', `${cluster.lb.kind}.log`]));
    for (const name of logs)
      expect(readFileSync(state('logs', name), 'utf8'), name).not.toContain(consoleKey);
    // The log line names the file the URL is in instead.
    expect(readFileSync(consoleLog(), 'utf8')).toContain('.workbench/console.url');

    // Nobody else can list or open anything under .workbench/ (console.log included, whoever made it).
    for (const folder of [state(), state('logs'), state('flags')]) expect(mode(folder), folder).toBe(0o700);
    // What the workbench itself writes is the owner's only anyway.
    for (const name of logs.filter((name) => name !== 'console.log'))
      expect(mode(state('logs', name)), name).toBe(0o600);
    expect(mode(state('cluster.json'))).toBe(0o600);
    expect(mode(state('console.url'))).toBe(0o600);
    expect(readFileSync(state('console.url'), 'utf8')).toBe(`${consoleUrl}/?key=${consoleKey}\n`);
  });
});
