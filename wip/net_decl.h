/* wip/net_decl.h - TEMPORARY: declarations of the ZMQ side channel and TCP data plane while they
   are developed; the lead merges this file into omniconn.h (replacing the #include). */
