// A mesh peer in a browser with @mesh-broker/sdk (see index.html): connects as the member named in the
// URL, sends one direct message to `to`, and lists every message it receives.
import { MeshClient } from '@mesh-broker/sdk';

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
const params = new URLSearchParams(location.search);

async function main() {
  const [url, meshId, pubkey, secretKey, to] = ['url', 'meshId', 'pubkey', 'secretKey', 'to'].map((name) => {
    const value = params.get(name);
    if (!value) throw new Error(`the page needs ?${name}=… (see the hint above)`);
    return value;
  });
  // The hello is signed with WebCrypto Ed25519 from the same hex seed a Node peer uses.
  const peer = new MeshClient({ urls: [url], meshId, keys: { pubkey, secretKey } });
  globalThis.peer = peer; // for a look from the developer tools
  peer.on('message', (message) => {
    const item = document.createElement('li');
    item.textContent = `${message.from.slice(0, 8)}…: ${message.body}`;
    item.dataset.from = message.from;
    item.dataset.body = message.body;
    $('messages').append(item);
  });
  peer.on('disconnected', ({ code, willReconnect }) => {
    $('status').textContent = willReconnect ? `reconnecting (closed ${code})` : `closed (${code})`;
  });
  peer.on('welcome', (welcome) => {
    $('status').textContent = 'connected';
    $('node').textContent = welcome.node;
  });
  await peer.connect();
  const sent = await peer.send(to, params.get('message') ?? 'hello from a browser peer');
  $('sent').textContent = sent.messageId;
}

main().catch((error) => {
  $('status').textContent = 'failed';
  $('error').textContent = error.message;
});
