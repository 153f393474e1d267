/**
 * The start's bounded wait for Postgres (broker/db/wait.ts) against an address that accepts and never
 * answers, as a black-holed or hung server does: each attempt ends at its own connect timeout (pg.Client's
 * `timeout expired`), which is an outage to wait out, not a fault to exit on. Node 24 in CI met this on a
 * port nothing listened on (startup.test: "start-up failed (infrastructure): timeout expired" instead of the
 * wait's "did not answer within 2 s").
 */
import { createServer, type Socket } from 'node:net';
import pino from 'pino';
import { afterAll, describe, expect, it } from 'vitest';
import { isDatabaseUnreachable } from '../../broker/db/errors.js';
import { DatabaseWaitError, waitForDatabase } from '../../broker/db/wait.js';

const sockets = new Set<Socket>();
const silent = createServer((socket) => {
  sockets.add(socket);
  socket.on('error', () => {});
});
afterAll(async () => {
  for (const socket of sockets) socket.destroy();
  await new Promise((resolve) => silent.close(resolve));
});

describe('waiting for Postgres at start', () => {
  it("pg.Client's own connect timeout is an outage", () => {
    expect(isDatabaseUnreachable(new Error('timeout expired'))).toBe(true);
  });

  it('a server that accepts and never answers is waited for, then the bound says so', async () => {
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const { port } = silent.address() as { port: number };
    const waiting = waitForDatabase(`postgres://postgres@127.0.0.1:${port}/meshbroker`, {
      waitMs: 1000,
      log: pino({ level: 'silent' }),
    });
    await expect(waiting).rejects.toBeInstanceOf(DatabaseWaitError);
    await expect(waiting).rejects.toThrow(/did not answer within 1 s .*timeout expired/);
  }, 15_000);
});
