/**
 * Baseline for the fan-out benchmark: what a user would pick instead of us. Socket.IO 4 with the Redis
 * adapter: a client joins a room (`sub`, acknowledged), a `pub` goes to everyone else in the room on every
 * server (the adapter relays it over Redis pub/sub). Bench-only; env PORT, REDIS_URL, ADAPTER_KEY.
 */
import { createAdapter } from '@socket.io/redis-adapter';
import { Redis } from 'ioredis';
import { Server } from 'socket.io';

const port = Number(process.env.PORT);
const pub = new Redis(process.env.REDIS_URL!);
const sub = pub.duplicate();
const io = new Server({ transports: ['websocket'], serveClient: false });
io.adapter(createAdapter(pub, sub, { key: process.env.ADAPTER_KEY ?? 'socket.io' }));
io.on('connection', (socket) => {
  socket.on('sub', (room: string, ack?: () => void) => {
    void socket.join(room);
    ack?.();
  });
  socket.on('pub', (room: string, data: unknown) => {
    socket.to(room).emit('data', data);
  });
});
io.listen(port);
console.log(`socket.io listening on ${port}`);
