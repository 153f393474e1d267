/**
 * The SDK's connect() as a library user meets it (issue 28 item 2): against a dead URL, a broker that
 * never answers, a refused hello, an abort; the connection state machine and the retry cap. Every
 * connect() here must settle: a guard turns a hang (the old SDK against a dead URL) into a failure.
 */

import { generateMemberKeys, MeshClient, MeshClosedError, MeshConnectError } from '@mesh-broker/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { WebSocketServer } from 'ws';
import { CuttableLink } from '../../cli/proxies/cuttable-link.js';
import type { TestNode } from '../helpers/broker.js';
import { closeAllClients, createMesh, type TestMesh } from '../helpers/mesh.js';
import { startNode } from '../helpers/nodes.js';
import { freePort } from '../helpers/ports.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';
import { pause, waitFor } from '../helpers/wait.js';

let db: TestDatabase;
let node: TestNode;
let mesh: TestMesh;
const made: MeshClient[] = [];
const cleanups: Array<() => Promise<void>> = [];

beforeAll(async () => {
  db = await createTestDatabase('sdk_connect');
  node = await startNode({ kind: 'in-process', databaseUrl: db.url });
  mesh = await createMesh(node, 2);
});
afterEach(async () => {
  for (const client of made.splice(0)) client.close();
  closeAllClients();
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

/** A WebSocket server that accepts the upgrade and the hello and never answers: a broker stuck. */
async function silentBroker(): Promise<string> {
  const port = await freePort();
  const server = new WebSocketServer({ port, host: '127.0.0.1' });
  await new Promise<void>((resolve) => server.once('listening', () => resolve()));
  cleanups.push(async () => {
    for (const socket of server.clients) socket.terminate();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return `ws://127.0.0.1:${port}/ws`;
}

async function proxied(): Promise<CuttableLink> {
  const proxy = await CuttableLink.start(node.wsUrl);
  cleanups.push(() => proxy.close());
  return proxy;
}
afterAll(async () => {
  await node?.stop();
  await db?.drop();
});

function client(urls: string[], options: Partial<ConstructorParameters<typeof MeshClient>[0]> = {}) {
  const made1 = new MeshClient({ urls, meshId: mesh.meshId, keys: mesh.members[0]!, ...options });
  made.push(made1);
  return made1;
}

/** What connect() settled with, or 'did not settle' after `ms`. */
async function settled(promise: Promise<unknown>, ms: number): Promise<unknown> {
  const guard = new Promise((resolve) => setTimeout(() => resolve(`did not settle within ${ms} ms`), ms));
  return Promise.race([
    promise.then(
      () => 'resolved',
      (error: unknown) => error,
    ),
    guard,
  ]);
}

describe('connect() always settles', () => {
  it('rejects against a dead URL (refused TCP) with code unreachable within its timeout', async () => {
    const dead = `ws://127.0.0.1:${await freePort()}/ws`;
    const peer = client([dead], { retry: { initialDelayMs: 20, maxDelayMs: 50 } });
    const started = Date.now();
    const outcome = await settled(peer.connect({ timeoutMs: 1000 }), 5000);
    expect(outcome).toMatchObject({ code: 'unreachable' });
    expect(outcome).toBeInstanceOf(MeshConnectError);
    expect(Date.now() - started).toBeLessThan(3000);
    expect(peer.state).toBe('suspended');
  });

  it('with reconnect: false, rejects unreachable at the first failed attempt and closes the client', async () => {
    const dead = `ws://127.0.0.1:${await freePort()}/ws`;
    const peer = client([dead], { reconnect: false });
    const outcome = await settled(peer.connect(), 5000);
    expect(outcome).toMatchObject({ code: 'unreachable', closed: { permanent: false } });
    expect(peer.state).toBe('closed');
  });

  it('rejects with code timeout when a socket opens but no welcome comes', async () => {
    const peer = client([await silentBroker()]);
    const outcome = await settled(peer.connect({ timeoutMs: 500 }), 5000);
    expect(outcome).toMatchObject({ code: 'timeout' });
    expect(outcome).toBeInstanceOf(MeshConnectError);
    expect(peer.state).toBe('suspended');
  });

  it('rejects with code refused and the broker close code when the hello is refused for good', async () => {
    const stranger = new MeshClient({ urls: [node.wsUrl], meshId: mesh.meshId, keys: generateMemberKeys() });
    made.push(stranger);
    const outcome = await settled(stranger.connect({ timeoutMs: 5000 }), 8000);
    expect(outcome).toMatchObject({
      code: 'refused',
      closed: { code: 4401, reason: 'unknown member', permanent: true },
    });
    // Still a MeshClosedError with `permanent`, as before MeshConnectError existed.
    expect(outcome).toBeInstanceOf(MeshClosedError);
    expect((outcome as MeshClosedError).permanent).toBe(true);
    expect(stranger.state).toBe('closed');
  });

  it('rejects with code aborted when its signal fires, and stops trying', async () => {
    const dead = `ws://127.0.0.1:${await freePort()}/ws`;
    const peer = client([dead], { retry: { initialDelayMs: 20, maxDelayMs: 50 } });
    const attempts: number[] = [];
    peer.on('reconnecting', (event) => attempts.push(event.attempt));
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error('user gave up')), 200);
    const outcome = await settled(peer.connect({ timeoutMs: 10_000, signal: controller.signal }), 5000);
    expect(outcome).toMatchObject({ code: 'aborted' });
    expect(String((outcome as Error).message)).toContain('user gave up');
    expect(peer.state).toBe('suspended');
    const after = attempts.length;
    await pause(300, 'a window of many backoffs (20 to 50 ms) in which a suspended client must not try');
    expect(attempts.length).toBe(after);
    // An already aborted signal rejects at once.
    await expect(peer.connect({ signal: AbortSignal.abort() })).rejects.toMatchObject({ code: 'aborted' });
  });

  it('suspends after maxAttempts and rejects unreachable; connect() again starts a fresh run that succeeds', async () => {
    const proxy = await proxied();
    proxy.refuse(true);
    const peer = client([proxy.wsUrl], { retry: { initialDelayMs: 10, maxDelayMs: 20, maxAttempts: 3 } });
    const states: string[] = [];
    peer.on('state', ({ to }) => states.push(to));
    const outcome = await settled(peer.connect(), 5000);
    expect(outcome).toMatchObject({ code: 'unreachable' });
    expect(proxy.accepted).toBe(3);
    expect(peer.state).toBe('suspended');
    expect(states).toEqual([
      'connecting',
      'disconnected',
      'connecting',
      'disconnected',
      'connecting',
      'suspended',
    ]);
    proxy.refuse(false);
    const welcome = await peer.connect({ timeoutMs: 5000 });
    expect(welcome.sessionId).toBe(peer.sessionId);
    expect(peer.state).toBe('connected');
  });
});

describe('the connection state machine against a node', () => {
  it('goes connecting → connected, disconnected → connecting → connected over a cut, and closed at close()', async () => {
    const proxy = await proxied();
    const peer = client([proxy.wsUrl], { retry: { initialDelayMs: 10, maxDelayMs: 50 } });
    expect(peer.state).toBe('disconnected');
    const changes: Array<{ from: string; to: string }> = [];
    peer.on('state', ({ from, to }) => changes.push({ from, to }));
    await peer.connect();
    proxy.cut();
    await waitFor(() => changes.length >= 4 && peer.state === 'connected', { what: 'the reconnect' });
    peer.close();
    expect(changes.map(({ from, to }) => `${from}→${to}`)).toEqual([
      'disconnected→connecting',
      'connecting→connected',
      'connected→disconnected',
      'disconnected→connecting',
      'connecting→connected',
      'connected→closed',
    ]);
    await expect(peer.connect()).rejects.toMatchObject({ code: 'closed' });
  });

  it('logs through the opt-in logger hook, and says nothing without one', async () => {
    const lines: string[] = [];
    const record = (level: string) => (message: string) => lines.push(`${level} ${message}`);
    const logger = {
      debug: record('debug'),
      info: record('info'),
      warn: record('warn'),
      error: record('error'),
    };
    const peer = client([node.wsUrl], { logger });
    await peer.connect();
    expect(lines).toContain('info mesh: disconnected → connecting');
    expect(lines).toContain('info mesh: connecting → connected');
  });
});
