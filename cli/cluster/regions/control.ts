/**
 * The control socket of a running two-region simulation: `workbench region cut|restore|promote|kill-primary|rejoin|status`
 * ask the `up --phase 4` process (which holds the links and the servers) to act. A Unix socket in
 * `.workbench/` (the owner's folder, 0700; the socket itself 0600), one JSON request per connection and
 * one JSON answer: `{op, region?}` → `{ok: true, result}` or `{ok: false, error}`.
 */
import { chmodSync, rmSync } from 'node:fs';
import { createConnection, createServer, type Server } from 'node:net';

export type ControlOp = 'cut' | 'restore' | 'promote' | 'kill-primary' | 'rejoin' | 'status';

export interface ControlRequest {
  op: ControlOp;
  region?: string;
  /** `cut`/`restore`: only the links of this service (e.g. `etcd`). */
  service?: string;
}

export type ControlAnswer = { ok: true; result: unknown } | { ok: false; error: string };

/** A Unix socket path is at most 107 bytes on Linux: say so instead of failing with EINVAL. */
const MAX_SOCKET_PATH = 107;

export function checkControlPath(path: string): void {
  if (Buffer.byteLength(path) > MAX_SOCKET_PATH)
    throw new Error(
      `the control socket path ${path} is longer than ${MAX_SOCKET_PATH} bytes: run "workbench up --phase 4" from a shorter folder`,
    );
}

/** Serves requests with `handle` until closed. */
export async function serveControl(
  path: string,
  handle: (request: ControlRequest) => Promise<unknown>,
): Promise<Server> {
  checkControlPath(path);
  rmSync(path, { force: true }); // left by a supervisor that was killed
  const server = createServer((socket) => {
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', async (chunk) => {
      text += chunk;
      const end = text.indexOf('\n');
      if (end === -1) return;
      let answer: ControlAnswer;
      try {
        answer = { ok: true, result: await handle(JSON.parse(text.slice(0, end)) as ControlRequest) };
      } catch (error) {
        answer = { ok: false, error: (error as Error).message };
      }
      socket.end(`${JSON.stringify(answer)}\n`);
    });
    socket.on('error', () => {});
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(path, () => resolve());
  });
  chmodSync(path, 0o600);
  return server;
}

/** Sends one request and resolves with the result; rejects with the supervisor's error. */
export function callControl(path: string, request: ControlRequest, timeoutMs = 120_000): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const socket = createConnection(path);
    let text = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`the simulation did not answer "${request.op}" within ${timeoutMs} ms`));
    }, timeoutMs);
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(`${JSON.stringify(request)}\n`));
    socket.on('data', (chunk) => {
      text += chunk;
    });
    socket.on('error', (error) => {
      clearTimeout(timer);
      reject(new Error(`cannot reach the simulation's control socket ${path}: ${error.message}`));
    });
    socket.on('end', () => {
      clearTimeout(timer);
      try {
        const answer = JSON.parse(text) as ControlAnswer;
        if (answer.ok) resolve(answer.result);
        else reject(new Error(answer.error));
      } catch {
        reject(new Error(`the simulation's answer was not JSON: ${text.slice(0, 200)}`));
      }
    });
  });
}
