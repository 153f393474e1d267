// A browser peer through the load balancer, with the SDK's browser build (@mesh-broker/sdk/browser).
import { MeshClient } from '/sdk/mesh-sdk.js';

const $ = (id) => document.querySelector(`[data-testid="${id}"]`);
const params = new URLSearchParams(location.search);
const [meshId, pubkey, secretKey] = ['meshId', 'pubkey', 'secretKey'].map((name) => params.get(name));

async function main() {
  if (!meshId || !pubkey || !secretKey) throw new Error('the page needs ?meshId=…&pubkey=…&secretKey=…');
  const state = await (await fetch('/api/state')).json();
  const url = `${state.loadBalancer.replace(/^http/, 'ws')}/ws`;
  const peer = new MeshClient({ urls: [url], meshId, keys: { pubkey, secretKey }, backoff: { maxMs: 1000 } });
  globalThis.peer = peer; // for a look from the developer tools
  let welcomes = 0;
  let count = 0;
  peer.on('welcome', (welcome) => {
    $('status').textContent = 'connected';
    $('node').textContent = welcome.node;
    $('welcomes').textContent = String(++welcomes);
  });
  peer.on('disconnected', ({ code, willReconnect }) => {
    $('status').textContent = willReconnect ? `reconnecting (closed ${code})` : `closed (${code})`;
  });
  peer.on('message', (message) => {
    const item = document.createElement('li');
    item.textContent = message.body;
    item.dataset.messageId = message.messageId;
    $('messages').append(item);
    $('count').textContent = String(++count);
  });
  $('status').textContent = `connecting to ${url}`;
  await peer.connect();
}

main().catch((error) => {
  $('status').textContent = 'failed';
  $('error').textContent = error.message;
});
