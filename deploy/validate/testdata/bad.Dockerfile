FROM golang:1.26 AS a
RUNN echo
COPY --form=a /x /y
EXPOSE abc
FROM
