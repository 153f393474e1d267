/**
 * The one way to start a broker process (cli/cluster/broker-process.ts), against the compiled broker
 * (dist/: run "npm run build" first): healthy when it serves, a start that fails is reported as soon as the
 * process is gone, stop() drains and is bounded, kill() crashes it.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BrokerProcess } from '../../cli/cluster/broker-process.js';
import { freePort } from '../../cli/ports.js';
import { ADMIN_TOKEN } from '../helpers/broker.js';
import { createTestDatabase, type TestDatabase } from '../helpers/postgres.js';

let db: TestDatabase;
const started: BrokerProcess[] = [];

beforeAll(async () => {
  db = await createTestDatabase('broker_process');
});
afterEach(() => {
  for (const broker of started.splice(0)) broker.kill();
});
afterAll(async () => {
  await db?.drop();
});

async function spawn(env: Record<string, string> = {}): Promise<BrokerProcess> {
  const port = await freePort();
  const broker = BrokerProcess.spawn({
    port,
    env: {
      DATABASE_URL: db.url,
      NODE_ID: `bp-${port}`,
      ADMIN_TOKEN,
      REDIS_KEY_PREFIX: `wbtest:bp-${port}:`,
      LOG_LEVEL: 'warn',
      ...env,
    },
    output: 'pipe',
  });
  broker.child.stdout!.resume();
  broker.child.stderr!.resume();
  started.push(broker);
  return broker;
}

const exitOf = (broker: BrokerProcess) => ({
  code: broker.child.exitCode,
  signal: broker.child.signalCode,
});

describe('BrokerProcess', () => {
  it('is healthy on its port, and stop() drains it (SIGTERM, exit 0)', async () => {
    const broker = await spawn();
    await broker.waitHealthy(20_000);
    expect((await fetch(`${broker.url}/health`)).status).toBe(200);
    await broker.stop();
    expect(exitOf(broker)).toEqual({ code: 0, signal: null });
  });

  it('reports a start that fails as soon as the process has exited, not at the timeout', async () => {
    const broker = await spawn({ ADMIN_TOKEN: 'too-short' });
    const begun = Date.now();
    await expect(broker.waitHealthy(20_000)).rejects.toThrow(/exited while starting/);
    expect(Date.now() - begun).toBeLessThan(10_000);
    expect(exitOf(broker).code).toBe(2);
  });

  it('stop() is bounded: a broker that cannot drain (stopped) is killed after the grace', async () => {
    const broker = await spawn();
    await broker.waitHealthy(20_000);
    broker.child.kill('SIGSTOP'); // its SIGTERM handler can never run now
    await broker.stop(300);
    expect(exitOf(broker)).toEqual({ code: null, signal: 'SIGKILL' });
  });

  it('kill() crashes it (SIGKILL)', async () => {
    const broker = await spawn();
    await broker.waitHealthy(20_000);
    const gone = new Promise((resolve) => broker.child.once('exit', resolve));
    broker.kill();
    await gone;
    expect(exitOf(broker)).toEqual({ code: null, signal: 'SIGKILL' });
  });
});
