// Stands in for `node:crypto` when the SDK runs in a browser: client.js only needs randomUUID.
export const randomUUID = () => globalThis.crypto.randomUUID();
