/* wip/net_impl.h - TEMPORARY: implementation of the ZMQ side channel and TCP data plane while they
   are developed; the lead merges this file into omniconn.h (replacing the #include). */
