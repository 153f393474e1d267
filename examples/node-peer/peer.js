// A mesh peer in Node with @mesh-broker/sdk (examples/README.md): connects as a member, sends one direct
// message to another member and prints the messages it receives, one JSON line each, until it has
// `--receive` of them (then exits 0) or `--wait-ms` passes (exit 1). The member keys are the ones
// `workbench mesh create` writes, or any ed25519 seed whose public key an operator added to the mesh.
//
//   node peer.js --url ws://127.0.0.1:8080/ws --mesh MESH_ID --pubkey HEX --secret-key HEX \
//     --to OTHER_PUBKEY [--message TEXT] [--receive N] [--wait-ms MS]
import { parseArgs } from 'node:util';
import { MeshClient } from '@mesh-broker/sdk';

const USAGE =
  'usage: node peer.js --url WS_URL --mesh MESH_ID --pubkey HEX --secret-key HEX --to PUBKEY ' +
  '[--message TEXT] [--receive N] [--wait-ms MS]';

function options() {
  const { values } = parseArgs({
    options: {
      url: { type: 'string', multiple: true },
      mesh: { type: 'string' },
      pubkey: { type: 'string' },
      'secret-key': { type: 'string' },
      to: { type: 'string' },
      message: { type: 'string', default: 'hello from a Node peer' },
      receive: { type: 'string', default: '1' },
      'wait-ms': { type: 'string', default: '30000' },
    },
  });
  const missing = ['url', 'mesh', 'pubkey', 'secret-key', 'to'].filter((name) => values[name] === undefined);
  if (missing.length > 0) throw new UsageError(`missing ${missing.map((name) => `--${name}`).join(', ')}`);
  const receive = Number(values.receive);
  const waitMs = Number(values['wait-ms']);
  if (!Number.isInteger(receive) || receive < 0) throw new UsageError('--receive must be a whole number');
  if (!Number.isInteger(waitMs) || waitMs <= 0)
    throw new UsageError('--wait-ms must be a positive whole number');
  return { ...values, receive, waitMs };
}

class UsageError extends Error {}

const print = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

async function main() {
  const args = options();
  // Several --url: tried in turn on every reconnect (the nodes of a cluster, or one load balancer).
  const peer = new MeshClient({
    urls: args.url,
    meshId: args.mesh,
    keys: { pubkey: args.pubkey, secretKey: args['secret-key'] },
  });
  const timer = setTimeout(() => {
    console.error(`peer: ${args.receive} message(s) not received within ${args.waitMs} ms`);
    peer.close();
    process.exit(1);
  }, args.waitMs);

  let received = 0;
  const done = new Promise((resolve) => {
    if (args.receive === 0) resolve();
    // Acked after this listener returns; a message replayed after a reconnect is dropped by its messageId.
    peer.on('message', (message) => {
      print({ event: 'message', from: message.from, body: message.body, messageId: message.messageId });
      if (++received === args.receive) resolve();
    });
  });
  peer.on('disconnected', ({ code, reason, willReconnect }) => {
    print({ event: 'disconnected', code, reason, willReconnect });
  });

  const welcome = await peer.connect(); // rejects with MeshClosedError when the broker refuses the member
  print({ event: 'connected', node: welcome.node, sessionId: peer.sessionId });
  // Resolves on the broker's `sent`: the message is stored and owed to the recipient until it acks it.
  const sent = await peer.send(args.to, args.message);
  print({ event: 'sent', to: args.to, messageId: sent.messageId });

  await done;
  clearTimeout(timer);
  peer.close();
}

main().catch((error) => {
  console.error(`peer: ${error.message}`);
  if (error instanceof UsageError) console.error(USAGE);
  process.exit(error instanceof UsageError ? 2 : 1);
});
