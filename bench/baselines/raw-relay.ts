/**
 * The floor of the fan-out benchmark: a minimal relay of `ws` and ioredis pub/sub, nothing else (no
 * identity, no durability, no acks). `{op:"sub", ch}` subscribes this socket (answered `{op:"subscribed"}`);
 * `{op:"pub", ch, data}` goes to this node's other subscribers at once and over Redis to the other nodes,
 * which skip their own publications. Bench-only; env PORT, REDIS_URL, CHANNEL_PREFIX.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { type WebSocket, WebSocketServer } from 'ws';

const port = Number(process.env.PORT);
const prefix = process.env.CHANNEL_PREFIX ?? 'relay:';
const self = randomBytes(6).toString('hex');
const pub = new Redis(process.env.REDIS_URL!);
const sub = pub.duplicate();
const local = new Map<string, Set<WebSocket>>();

const deliver = (ch: string, text: string, except?: WebSocket) => {
  for (const socket of local.get(ch) ?? []) if (socket !== except) socket.send(text);
};

sub.on('message', (channel: string, message: string) => {
  const { n, ch, text } = JSON.parse(message) as { n: string; ch: string; text: string };
  if (n !== self) deliver(ch, text);
  void channel;
});

const server = new WebSocketServer({ port, host: '127.0.0.1' });
server.on('connection', (socket) => {
  const mine = new Set<string>();
  socket.on('message', (raw) => {
    const frame = JSON.parse(String(raw)) as { op: string; ch: string; data?: unknown };
    if (frame.op === 'sub') {
      let set = local.get(frame.ch);
      if (!set) {
        set = new Set();
        local.set(frame.ch, set);
        void sub.subscribe(prefix + frame.ch);
      }
      set.add(socket);
      mine.add(frame.ch);
      socket.send(JSON.stringify({ op: 'subscribed', ch: frame.ch }));
    } else if (frame.op === 'pub') {
      const text = JSON.stringify({ ch: frame.ch, data: frame.data });
      deliver(frame.ch, text, socket);
      void pub.publish(prefix + frame.ch, JSON.stringify({ n: self, ch: frame.ch, text }));
    }
  });
  socket.on('close', () => {
    for (const ch of mine) local.get(ch)?.delete(socket);
  });
});
server.on('listening', () => console.log(`relay listening on ${port}`));
