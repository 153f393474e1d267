import { createServer } from 'node:net';

/**
 * A TCP port on 127.0.0.1 that was free a moment ago: `preferred` when it is free, else any. The one way
 * the workbench, its chaos runs, benchmarks and tests pick a port.
 */
export function freePort(preferred?: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', (error) => (preferred ? resolve(freePort()) : reject(error)));
    server.listen(preferred ?? 0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}
