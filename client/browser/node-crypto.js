// Stands in for `node:crypto` in the browser build (vite.browser.config.ts): client.ts and mcp.ts need only randomUUID.
export const randomUUID = () => globalThis.crypto.randomUUID();
