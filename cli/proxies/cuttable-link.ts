import { connect, createServer, type Socket } from 'node:net';
import { closeProxy, listenOnLoopback } from './loopback.js';

/** The most of a connection's first bytes kept to read an HTTP head (an upgrade's is under 1 KiB). */
const HEAD_BYTES = 8192;
/** The most heads kept each way: the link is for checks and tests of a few dozen connections. */
const MAX_HEADS = 1000;

/**
 * A TCP relay between peers and a load balancer whose connections can be cut at once, as a network that
 * drops does (both halves reset, no close frame), and which keeps each connection's HTTP heads both ways,
 * so a check sees what a client sent on its upgrade (its `Cookie` header) and what the load balancer set
 * (`Set-Cookie`) without trusting the client. The smoke check lb-sticky-reconnect and tests use it.
 */
export class CuttableLink {
  /** Each connection's first bytes up to the end of its HTTP head, in the order they connected. */
  readonly requestHeads: string[] = [];
  readonly responseHeads: string[] = [];
  /** Connections accepted so far, refused ones included. */
  accepted = 0;
  private refusing = false;
  private readonly connections = new Set<Socket>();

  private constructor(
    private readonly server: ReturnType<typeof createServer>,
    readonly port: number,
    private readonly upstreamPath: string,
  ) {}

  /** A link to `upstream` (an http:// or ws:// URL: its host and port; a ws:// path is kept for `wsUrl`). */
  static async start(upstream: string): Promise<CuttableLink> {
    const { hostname, port, pathname } = new URL(upstream);
    const server = createServer();
    const link: CuttableLink = new CuttableLink(server, await listenOnLoopback(server), pathname);
    server.on('connection', (client) => {
      link.accepted++;
      if (link.refusing) client.destroy();
      else link.relay(client, hostname, Number(port));
    });
    return link;
  }

  /** The upstream URL's path through the link: `ws://127.0.0.1:<port><path>`. */
  get wsUrl(): string {
    return this.url(this.upstreamPath);
  }

  /** While on, new connections are closed as they come (the upstream unreachable meanwhile). */
  refuse(on: boolean): void {
    this.refusing = on;
  }

  /** `ws://127.0.0.1:<port><path>`: the URL peers use instead of the load balancer's. */
  url(path: string): string {
    return `ws://127.0.0.1:${this.port}${path}`;
  }

  /** `http://127.0.0.1:<port>`: the link as an HTTP base URL. */
  get httpUrl(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Resets every connection through the link; new ones go through as before. */
  cut(): number {
    const count = this.connections.size;
    for (const socket of this.connections) socket.resetAndDestroy();
    this.connections.clear();
    return count;
  }

  close(): Promise<void> {
    return closeProxy(this.server, this.connections);
  }

  private relay(client: Socket, host: string, port: number): void {
    const upstream = connect({ host, port });
    this.connections.add(client).add(upstream);
    keepHead(client, this.requestHeads);
    keepHead(upstream, this.responseHeads);
    client.pipe(upstream);
    upstream.pipe(client);
    const drop = () => {
      client.destroy();
      upstream.destroy();
      this.connections.delete(client);
      this.connections.delete(upstream);
    };
    for (const side of [client, upstream]) {
      side.on('error', drop);
      side.on('close', drop);
    }
  }

  /** The `Cookie` header of each upgrade request seen, in order (undefined where there was none). */
  cookiesSent(): Array<string | undefined> {
    return this.requestHeads.map((head) => headerOf(head, 'cookie'));
  }

  /** The `Set-Cookie` header of each response seen, in order (undefined where there was none). */
  cookiesSet(): Array<string | undefined> {
    return this.responseHeads.map((head) => headerOf(head, 'set-cookie'));
  }
}

/** Appends the socket's first bytes up to the end of its HTTP head (bounded) to `heads`, as they come. */
function keepHead(socket: Socket, heads: string[]): void {
  if (heads.length >= MAX_HEADS) return;
  let index = -1;
  const onData = (chunk: Buffer) => {
    const head = (index < 0 ? '' : heads[index]!) + chunk.toString('latin1', 0, HEAD_BYTES);
    if (index < 0) index = heads.push(head) - 1;
    else heads[index] = head;
    if (head.includes('\r\n\r\n') || head.length >= HEAD_BYTES) socket.off('data', onData);
  };
  socket.on('data', onData);
}

function headerOf(head: string, name: string): string | undefined {
  const lines = head.split('\r\n\r\n')[0]!.split('\r\n');
  const line = lines.find((l) => l.toLowerCase().startsWith(`${name}:`));
  return line?.slice(name.length + 1).trim();
}
