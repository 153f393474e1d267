/**
 * What the workbench's TCP proxies (cli/proxies/) share: listening on loopback only, stopping, and ending a
 * socket whose other half is gone without cutting its last bytes.
 */
import type { Server, Socket } from 'node:net';

/** Listens on 127.0.0.1 (`port`, or a free one when 0) and resolves with the port once it accepts. */
export function listenOnLoopback(server: Server, port = 0): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      const address = server.address();
      resolve(typeof address === 'object' && address ? address.port : 0);
    });
  });
}

/** Ends a socket whose other half is gone, and destroys it once its last bytes are out (or soon). */
export function finish(socket: Socket): void {
  if (socket.destroyed) return;
  socket.end();
  if (socket.writableFinished) socket.destroy();
  else socket.once('finish', () => socket.destroy());
  setTimeout(() => socket.destroy(), 2000).unref();
}

/**
 * Stops a proxy: no new connections, every open one destroyed (their pending bytes dropped, as a proxy
 * process killed would). Resolves once the server has closed.
 */
export function closeProxy(server: Server, connections: Set<{ destroy(): void }>): Promise<void> {
  return new Promise<void>((resolve) => {
    server.close(() => resolve());
    for (const connection of connections) connection.destroy();
    connections.clear();
  });
}
