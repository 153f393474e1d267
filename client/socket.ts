/**
 * Opens the SDK's WebSocket in Node, with the cookie jar: the cookies a load balancer set on an earlier
 * upgrade are sent on this one, and the ones it sets now are kept (client/cookies.ts says why). The
 * browser build swaps this module for browser/socket.js, since a browser sends and keeps cookies itself.
 */
import WebSocket from 'ws';
import type { CookieJar } from './cookies.js';

export function openSocket(url: string, cookies: CookieJar | undefined): WebSocket {
  const cookie = cookies?.header(url);
  const socket = new WebSocket(url, cookie === undefined ? {} : { headers: { cookie } });
  if (cookies) socket.on('upgrade', (response) => cookies.store(url, response.headers['set-cookie']));
  return socket;
}
