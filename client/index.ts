export { type ClientEvents, MeshClient, type MeshClientOptions, MeshRequestError } from './client.js';
export type * from './frames.js';
export { generateMemberKeys, type MemberKeys, pubkeyOf, signHello } from './keys.js';
