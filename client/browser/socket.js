// Stands in for client/socket.ts in the browser build (vite.browser.config.ts): the browser keeps the load
// balancer's cookies and sends them on every upgrade by itself, so there is no jar to fill or read.
import WebSocket from './ws.js';

export function openSocket(url) {
  return new WebSocket(url);
}
