/**
 * A worker of the idle-connections benchmark (bench/idle.ts): opens COUNT WebSocket sessions to one node
 * from its own loopback source address (so no single address runs out of ephemeral ports), each with a
 * signed hello, then holds them open and silent until killed. Several workers split the sockets, because
 * one process may hold at most `ulimit -n` of them. Prints one JSON line when done.
 * argv: wsUrl count localAddress plansJson (file of [{meshId, keys}]) sessionsPerPlan
 */
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { signHello } from '@mesh-broker/sdk';
import WebSocket from 'ws';

const [url, countText, localAddress, plansFile, perPlanText, offsetText] = process.argv.slice(2);
const count = Number(countText);
const perPlan = Number(perPlanText);
const offset = Number(offsetText ?? 0);
const plans = JSON.parse(readFileSync(plansFile!, 'utf8')) as Array<{
  meshId: string;
  keys: { pubkey: string; secretKey: string };
}>;
const sockets: WebSocket[] = [];
let connected = 0;
let failed = 0;
let firstError = '';
const CONCURRENCY = 64;

function open(i: number): Promise<void> {
  const plan = plans[Math.floor((offset + i) / perPlan) % plans.length]!;
  return new Promise((resolve) => {
    const socket = new WebSocket(url!, { localAddress, handshakeTimeout: 30_000 });
    let finished = false;
    // Only the first outcome of a socket counts (a welcomed socket that closes later is not a failure here).
    const done = (ok: boolean, why?: string) => {
      if (finished) return;
      finished = true;
      if (ok) connected++;
      else {
        failed++;
        firstError ||= why ?? 'unknown';
      }
      resolve();
    };
    socket.once('open', async () => {
      const hello = await signHello(plan.keys, plan.meshId, randomUUID());
      socket.send(JSON.stringify({ type: 'hello', v: 1, ...hello }));
    });
    socket.on('message', (raw) => {
      const type = (JSON.parse(String(raw)) as { type: string }).type;
      if (type === 'welcome') done(true);
      else if (type === 'error') done(false, String(raw));
    });
    socket.once('error', (error) => done(false, error.message));
    socket.once('close', (code) => done(false, `closed ${code}`));
    sockets.push(socket);
  });
}

let next = 0;
await Promise.all(
  Array.from({ length: CONCURRENCY }, async () => {
    while (next < count) {
      await open(next++);
    }
  }),
);
console.log(JSON.stringify({ connected, failed, firstError }));
setInterval(() => {}, 60_000); // hold the sockets until the parent kills this worker
