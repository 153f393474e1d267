/**
 * A TCP relay in front of a node for the SDK tests: `drop()` ends every connection through it at once (a
 * network cut the client notices), `refuse(true)` closes new ones as they come (the node unreachable
 * meanwhile). Used by tests/integration/sdk-*.test.ts.
 */
import { createServer, type Socket, connect as tcpConnect } from 'node:net';

export interface SdkProxy {
  wsUrl: string;
  connections: number;
  drop(): void;
  refuse(on: boolean): void;
  close(): Promise<void>;
}

export async function startSdkProxy(targetWsUrl: string): Promise<SdkProxy> {
  const target = new URL(targetWsUrl);
  const open = new Set<Socket>();
  let refusing = false;
  const server = createServer((client) => {
    proxy.connections++;
    if (refusing) return void client.destroy();
    const upstream = tcpConnect(Number(target.port), target.hostname);
    for (const socket of [client, upstream]) {
      open.add(socket);
      socket.on('error', () => {});
      socket.on('close', () => {
        open.delete(socket);
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  const proxy: SdkProxy = {
    wsUrl: `ws://127.0.0.1:${port}${target.pathname}`,
    connections: 0,
    drop: () => {
      for (const socket of open) socket.destroy();
    },
    refuse: (on) => {
      refusing = on;
    },
    close: async () => {
      proxy.drop();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  return proxy;
}
