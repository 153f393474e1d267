/**
 * The console's HTTP server (the workbench's, not a broker's): the page, its state as JSON, the flag flip,
 * and the browser peer page with the SDK files it imports. Loopback only.
 *
 * Who may use it: loopback is not enough (every account of the machine reaches 127.0.0.1, while the
 * cluster's admin token sits in a file only its owner reads). The console makes a random key at start and
 * prints its URL with `?key=…`; a request carrying the key gets it back as an HttpOnly, SameSite=Strict
 * cookie, and every other request needs that cookie (POST /api/flags also takes the admin token, for
 * scripts). The page never holds the admin token. SameSite=Strict keeps other web sites in the operator's
 * browser from riding the cookie, and the Host check stops DNS rebinding (a foreign name resolved to
 * 127.0.0.1 would make the page same-origin). SameSite does not tell loopback ports apart, so every
 * state-changing request must also come from the console's own origin (same-origin.ts), and no other page
 * may frame this one (a framed flip button could be clicked through a decoy).
 */

import { timingSafeEqual } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { packageRoot } from '../../broker/paths.js';
import { BadFlipRequest, type FlipOutcome, type FlipRequest, parseFlipRequest } from './flag-flip.js';
import { changesState, crossOriginRefusal } from './same-origin.js';
import type { Snapshot } from './snapshot.js';

const MAX_BODY_BYTES = 4096;

export interface ConsoleBackend {
  adminToken: string;
  /** The console's own key: in the URL it prints, then in a cookie. */
  key: string;
  snapshot(): Snapshot | undefined;
  flip(request: FlipRequest): Promise<FlipOutcome>;
}

const STATIC = join(packageRoot(), 'cli', 'console', 'static');
/**
 * The peer SDK's browser build (@mesh-broker/sdk/browser: one ES module, client/vite.browser.config.ts),
 * the file a peer page of any web site would load. Resolved by Node's own resolver, not vitest's, so a
 * test run serves the built module too, never the TypeScript source.
 */
const BROWSER_SDK = createRequire(import.meta.url).resolve('@mesh-broker/sdk/browser');

/**
 * Files served as they are: the pages, and for the peer page the SDK's browser build. A fixed list, so
 * no path from a URL ever reaches the file system.
 */
const FILES: Record<string, { path: string; type: string }> = {
  '/console.js': { path: join(STATIC, 'console.js'), type: 'text/javascript' },
  '/console.css': { path: join(STATIC, 'console.css'), type: 'text/css' },
  '/peer': { path: join(STATIC, 'peer.html'), type: 'text/html' },
  '/peer.js': { path: join(STATIC, 'peer.js'), type: 'text/javascript' },
  '/sdk/mesh-sdk.js': { path: BROWSER_SDK, type: 'text/javascript' },
};

const COOKIE = 'wb_console_key';

function same(presented: string | undefined | null, expected: string): boolean {
  const a = Buffer.from(presented ?? '');
  const b = Buffer.from(expected);
  return a.length === b.length && timingSafeEqual(a, b);
}

function cookieOf(request: IncomingMessage): string | undefined {
  for (const part of (request.headers.cookie ?? '').split(';')) {
    const [name, ...value] = part.trim().split('=');
    if (name === COOKIE) return value.join('=');
  }
  return undefined;
}

function send(response: ServerResponse, status: number, type: string, body: string): void {
  response.writeHead(status, {
    'content-type': `${type}; charset=utf-8`,
    'cache-control': 'no-store',
    'x-content-type-options': 'nosniff',
    // Never inside another page's frame (clickjacking of the flip buttons), and the URL with its key never
    // sent as a Referer to another origin.
    'x-frame-options': 'DENY',
    'content-security-policy': "frame-ancestors 'none'",
    'referrer-policy': 'same-origin',
  });
  response.end(body);
}

const sendJson = (response: ServerResponse, status: number, value: unknown) =>
  send(response, status, 'application/json', JSON.stringify(value));

const sendError = (response: ServerResponse, status: number, error: string, message: string) =>
  sendJson(response, status, { error, message });

function readBody(request: IncomingMessage): Promise<string | undefined> {
  return new Promise((resolve, reject) => {
    let body = '';
    let tooLarge = false;
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => {
      if (tooLarge) return; // keep reading to the end (to answer 413), but keep nothing more
      body += chunk;
      if (body.length > MAX_BODY_BYTES) {
        tooLarge = true;
        body = '';
      }
    });
    request.on('end', () => resolve(tooLarge ? undefined : body));
    request.on('error', reject);
  });
}

export interface ConsoleServer {
  url: string;
  server: Server;
  close(): Promise<void>;
}

export async function startConsoleServer(
  backend: ConsoleBackend,
  options: { port: number; host?: string } = { port: 0 },
): Promise<ConsoleServer> {
  const host = options.host ?? '127.0.0.1';
  const page = await readFile(join(STATIC, 'console.html'), 'utf8');
  let port = 0;

  const handle = async (request: IncomingMessage, response: ServerResponse) => {
    const allowedHosts = [`127.0.0.1:${port}`, `localhost:${port}`];
    if (!allowedHosts.includes(request.headers.host ?? ''))
      return sendError(response, 421, 'wrong_host', `this console answers to ${allowedHosts.join(' or ')}`);
    const url = new URL(request.url ?? '/', 'http://console');
    const path = url.pathname;
    const method = request.method ?? 'GET';
    const keyInUrl = same(url.searchParams.get('key'), backend.key);
    if (keyInUrl)
      response.setHeader('set-cookie', `${COOKIE}=${backend.key}; HttpOnly; SameSite=Strict; Path=/`);
    const admin = same(request.headers.authorization, `Bearer ${backend.adminToken}`);
    if (!keyInUrl && !same(cookieOf(request), backend.key) && !(admin && path === '/api/flags'))
      return sendError(
        response,
        401,
        'unauthorized',
        'open the URL "workbench console" printed (or the one in .workbench/console.url): it carries the console key (?key=…)',
      );
    if (changesState(method)) {
      const ownOrigins = allowedHosts.map((allowed) => `http://${allowed}`);
      const refusal = crossOriginRefusal(request.headers, ownOrigins, admin ? 'admin-token' : 'cookie');
      if (refusal) return sendError(response, 403, 'cross_origin', refusal);
    }

    if (path === '/api/flags') {
      if (method !== 'POST') return sendError(response, 405, 'method_not_allowed', 'POST a flag change');
      const body = await readBody(request);
      if (body === undefined)
        return sendError(response, 413, 'too_large', `the body is over ${MAX_BODY_BYTES} bytes`);
      let flip: FlipRequest;
      try {
        flip = parseFlipRequest(body);
      } catch (error) {
        if (error instanceof BadFlipRequest) return sendError(response, 400, 'bad_request', error.message);
        throw error;
      }
      return sendJson(response, 200, await backend.flip(flip));
    }
    if (method !== 'GET') return sendError(response, 405, 'method_not_allowed', `${method} ${path}`);
    if (path === '/' || path === '/index.html') {
      return send(response, 200, 'text/html', page);
    }
    if (path === '/api/state') {
      const snapshot = backend.snapshot();
      return snapshot
        ? sendJson(response, 200, snapshot)
        : sendError(response, 503, 'starting', 'the first poll of the cluster has not finished');
    }
    const file = FILES[path];
    if (file) return send(response, 200, file.type, await readFile(file.path, 'utf8'));
    return sendError(response, 404, 'not_found', `nothing at ${path}`);
  };

  const server = createServer((request, response) => {
    handle(request, response).catch((error: Error) => {
      if (!response.headersSent) sendError(response, 500, 'internal', error.message);
      else response.destroy();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, host, () => resolve());
  });
  port = (server.address() as AddressInfo).port;
  return {
    url: `http://${host}:${port}`,
    server,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
